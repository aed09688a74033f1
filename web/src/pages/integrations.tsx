/** Code-host integrations of the workspace (docs/codehost.md); credentials are write-only and never shown. */
import { useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { Pager } from '../components/pager.tsx';
import { Time } from '../components/time.tsx';
import { useApp, useResource } from '../hooks.ts';

const LIMIT = 20;

export function IntegrationsPage() {
  const { api } = useApp();
  const [offset, setOffset] = useState(0);
  const list = useResource(
    () => data(api.GET('/v1/integrations/forge/codehost', { params: { query: { limit: LIMIT, offset } } })),
    [offset],
  );
  const integrations = list.value?.resources ?? [];
  return (
    <>
      <PageTitle title="Code hosts" />
      <p class="help">
        Integrations with a code host (GitHub or GitHub Enterprise Server) that codehost deployments build from and
        whose push webhooks make new revisions.
      </p>
      <ErrorNotice error={list.error} />
      <div class="table-frame" aria-busy={list.loading}>
        <table class="list">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Kind</th>
              <th scope="col" class="wide-only">
                API
              </th>
              <th scope="col" class="wide-only">
                Webhook URL
              </th>
              <th scope="col" class="wide-only">
                Created
              </th>
            </tr>
          </thead>
          <tbody>
            {integrations.map((i) => (
              <tr key={i.id}>
                <th scope="row">{i.name}</th>
                <td>{i.kind === 'app' ? `GitHub App ${i.app_id ?? ''}` : 'Access token'}</td>
                <td class="wide-only breakable">{i.api_url}</td>
                <td class="wide-only breakable">
                  <code>{i.webhook_url}</code>
                </td>
                <td class="wide-only">
                  <Time iso={i.created_at} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {list.value && integrations.length === 0 && <p class="empty">No code-host integrations in this workspace.</p>}
      </div>
      <Pager offset={offset} shown={integrations.length} limit={LIMIT} onOffset={setOffset} />
    </>
  );
}
