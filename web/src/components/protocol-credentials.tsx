/**
 * A LangGraph deployment's protocol credentials (docs/langgraph.md, "Who may call MCP and A2A"): the
 * list without the credentials themselves, a new one shown once, and revoke. Any key of the workspace
 * lists them; minting and revoking take an admin key, and another key sees the service's refusal.
 */
import { useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import type { CreatedProtocolCredential } from '../api/types.ts';
import { useApp, useResource } from '../hooks.ts';
import { field } from '../forms.ts';
import { ErrorNotice } from './notice.tsx';
import { Pager } from './pager.tsx';
import { Time } from './time.tsx';

const LIMIT = 20;

function NewCredential({ created, onDone }: { created: CreatedProtocolCredential; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="new-key" role="status">
      <h3>Credential “{created.name}” created</h3>
      <p>
        <strong>Copy it now: it is shown only this once.</strong> MCP and A2A clients send it as{' '}
        <code>Authorization: Bearer …</code>.
      </p>
      <p>
        <code class="secret breakable" aria-label="The new protocol credential">
          {created.credential}
        </code>
      </p>
      <div class="actions">
        <button
          type="button"
          onClick={() =>
            void navigator.clipboard?.writeText(created.credential).then(
              () => setCopied(true),
              () => setCopied(false),
            )
          }
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        <button type="button" onClick={onDone}>
          I have kept it
        </button>
      </div>
    </div>
  );
}

export function ProtocolCredentials({ deploymentId }: { deploymentId: string }) {
  const { api } = useApp();
  const [offset, setOffset] = useState(0);
  const [created, setCreated] = useState<CreatedProtocolCredential | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const path = { deployment_id: deploymentId };
  const list = useResource(
    () =>
      data(
        api.GET('/v2/deployments/{deployment_id}/protocol-credentials', {
          params: { path, query: { limit: LIMIT, offset } },
        }),
      ),
    [deploymentId, offset],
  );
  const credentials = list.value?.resources ?? [];

  /** Resolves true when the credential was made (the form is then cleared). */
  const create = async (form: FormData): Promise<boolean> => {
    setBusy(true);
    setError(null);
    try {
      const name = field(form, 'name');
      const made = await data(
        api.POST('/v2/deployments/{deployment_id}/protocol-credentials', {
          params: { path },
          body: name ? { name } : {},
        }),
      );
      setCreated(made);
      if (offset !== 0) setOffset(0);
      list.reload();
      return true;
    } catch (failure) {
      setError(failure);
      return false;
    } finally {
      setBusy(false);
    }
  };

  const revoke = async (id: string, name: string) => {
    if (!window.confirm(`Revoke the credential “${name}”? The deployment refuses it within 10 seconds.`)) return;
    setError(null);
    try {
      await data(
        api.DELETE('/v2/deployments/{deployment_id}/protocol-credentials/{credential_id}', {
          params: { path: { ...path, credential_id: id } },
        }),
      );
    } catch (failure) {
      setError(failure);
    }
    list.reload();
  };

  return (
    <>
      <p class="muted">
        What MCP and A2A clients send as <code>Authorization: Bearer …</code> when this deployment requires a credential
        (its variable <code>SLIPWAY_PROTOCOLS_AUTH=credential</code>, or the operator&apos;s setting). A project with
        its own <code>auth</code> checks its own tokens instead. A credential opens this deployment&apos;s MCP and A2A
        endpoints and nothing else.
      </p>
      {created && <NewCredential created={created} onDone={() => setCreated(null)} />}
      <form
        class="inline-form"
        aria-labelledby="new-protocol-credential"
        onSubmit={(event) => {
          event.preventDefault();
          const form = event.currentTarget;
          void create(new FormData(form)).then((made) => made && form.reset());
        }}
      >
        <h3 id="new-protocol-credential">New credential</h3>
        <label>
          <span>Credential name</span>
          <input name="name" maxLength={128} autocomplete="off" placeholder="protocol credential" />
        </label>
        <button type="submit" class="primary" disabled={busy}>
          Create credential
        </button>
      </form>
      <ErrorNotice error={error ?? list.error} />
      <div class="table-frame" aria-busy={list.loading}>
        <table class="list" aria-label="Protocol credentials">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col" class="wide-only">
                Starts with
              </th>
              <th scope="col" class="wide-only">
                Created
              </th>
              <th scope="col" class="wide-only">
                Last used
              </th>
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {credentials.map((c) => (
              <tr key={c.id} class={c.revoked_at ? 'revoked' : undefined}>
                <th scope="row">{c.name}</th>
                <td class="wide-only">
                  <code>{c.credential_prefix}…</code>
                </td>
                <td class="wide-only">
                  <Time iso={c.created_at} />
                </td>
                <td class="wide-only">
                  {c.last_used_at ? <Time iso={c.last_used_at} /> : <span class="muted">never</span>}
                </td>
                <td>
                  {c.revoked_at ? (
                    <span class="muted">
                      revoked <Time iso={c.revoked_at} />
                    </span>
                  ) : (
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Revoke ${c.name}`}
                      onClick={() => void revoke(c.id, c.name)}
                    >
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {list.value && credentials.length === 0 && <p class="empty">No protocol credentials.</p>}
      </div>
      <Pager offset={offset} shown={credentials.length} limit={LIMIT} onOffset={setOffset} />
    </>
  );
}
