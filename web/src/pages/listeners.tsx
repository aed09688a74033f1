/** The workspace's listeners and whether their agents are calling in (docs/listener.md). */
import { useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { Pager } from '../components/pager.tsx';
import { StatusBadge } from '../components/status-badge.tsx';
import { Time } from '../components/time.tsx';
import { useApp, useResource } from '../hooks.ts';

const LIMIT = 20;

export function ListenersPage() {
  const { api } = useApp();
  const [offset, setOffset] = useState(0);
  const list = useResource(
    () => data(api.GET('/v2/listeners', { params: { query: { limit: LIMIT, offset } } })),
    [offset],
  );
  const listeners = list.value?.resources ?? [];
  return (
    <>
      <PageTitle title="Listeners" />
      <p class="help">
        Agents in your Kubernetes clusters that run external container deployments. Register one with{' '}
        <code>POST /v2/listeners</code>, then run its agent in the cluster.
      </p>
      <ErrorNotice error={list.error} />
      <div class="table-frame" aria-busy={list.loading}>
        <table class="list">
          <thead>
            <tr>
              <th scope="col">Cluster</th>
              <th scope="col">State</th>
              <th scope="col">Last seen</th>
              <th scope="col" class="wide-only">
                Namespaces
              </th>
              <th scope="col" class="wide-only">
                Agent
              </th>
            </tr>
          </thead>
          <tbody>
            {listeners.map((l) => (
              <tr key={l.id}>
                <th scope="row">
                  {l.compute_id}
                  <div class="muted small">
                    <code>{l.id.slice(0, 8)}</code>
                  </div>
                </th>
                <td>
                  <StatusBadge status={l.state} />
                </td>
                <td>
                  <Time iso={l.last_seen_at} />
                </td>
                <td class="wide-only">
                  {l.compute_config.k8s_namespaces.join(', ')}
                  {l.namespaces_not_watched && l.namespaces_not_watched.length > 0 && (
                    <div class="warning small">Not watched by the agent: {l.namespaces_not_watched.join(', ')}</div>
                  )}
                </td>
                <td class="wide-only">
                  {l.agent_version ?? <span class="muted">unknown</span>}
                  {l.agent_message && <div class="muted small">{l.agent_message}</div>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {list.value && listeners.length === 0 && <p class="empty">No listeners in this workspace.</p>}
      </div>
      <Pager offset={offset} shown={listeners.length} limit={LIMIT} onOffset={setOffset} />
    </>
  );
}
