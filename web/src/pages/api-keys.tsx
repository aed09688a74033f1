/**
 * API keys (admin keys only): the list without the keys themselves, a new key shown once, and revoke.
 * A non-admin key gets the service's own refusal in place of the list.
 */
import { useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import type { CreatedApiKey } from '../api/types.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { Pager } from '../components/pager.tsx';
import { Time } from '../components/time.tsx';
import { field } from '../forms.ts';
import { useApp, useResource } from '../hooks.ts';

const LIMIT = 50;

function NewKey({ created, onDone }: { created: CreatedApiKey; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="panel new-key" role="status">
      <h2>Key “{created.name}” created</h2>
      <p>
        <strong>Copy it now: it is shown only this once.</strong> Send it as the <code>X-Api-Key</code> header.
      </p>
      <p>
        <code class="secret breakable" aria-label="The new API key">
          {created.key}
        </code>
      </p>
      <div class="actions">
        <button
          type="button"
          onClick={() =>
            void navigator.clipboard?.writeText(created.key).then(
              () => setCopied(true),
              // Clipboard access refused (plain http on another host): the key is on screen to select.
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

export function ApiKeysPage() {
  const { api, session } = useApp();
  const [offset, setOffset] = useState(0);
  const [created, setCreated] = useState<CreatedApiKey | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const list = useResource(
    () => data(api.GET('/v2/api-keys', { params: { query: { limit: LIMIT, offset } } })),
    [offset],
  );
  const keys = list.value?.resources ?? [];
  // Only an organization key may make organization keys; the service says so too, this only hides the choice.
  const organizationKey = session.workspace !== null && session.apiKey !== null;

  /** Resolves true when the key was made (the form is then cleared). */
  const create = async (form: FormData): Promise<boolean> => {
    setBusy(true);
    setError(null);
    try {
      const scope = field(form, 'scope');
      const role = form.get('role') === 'admin' ? 'admin' : 'member';
      const key = await data(
        api.POST('/v2/api-keys', {
          body: { name: field(form, 'name'), role, ...(scope === 'organization' ? { workspace_id: null } : {}) },
        }),
      );
      setCreated(key);
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
    if (!window.confirm(`Revoke the key “${name}”? Anything using it stops working at once.`)) return;
    setError(null);
    try {
      await data(api.DELETE('/v2/api-keys/{api_key_id}', { params: { path: { api_key_id: id } } }));
    } catch (failure) {
      setError(failure);
    }
    list.reload();
  };

  return (
    <>
      <PageTitle title="API keys" />
      {created && <NewKey created={created} onDone={() => setCreated(null)} />}
      <form
        class="panel inline-form"
        aria-labelledby="new-key"
        onSubmit={(event) => {
          event.preventDefault();
          const form = event.currentTarget;
          void create(new FormData(form)).then((made) => made && form.reset());
        }}
      >
        <h2 id="new-key">New key</h2>
        <label>
          <span>Name</span>
          <input name="name" required maxLength={128} autocomplete="off" />
        </label>
        <label>
          <span>Role</span>
          <select name="role">
            <option value="member">member</option>
            <option value="admin">admin</option>
          </select>
        </label>
        {organizationKey && (
          <label>
            <span>For</span>
            <select name="scope">
              <option value="workspace">this workspace</option>
              <option value="organization">the whole organization</option>
            </select>
          </label>
        )}
        <button type="submit" class="primary" disabled={busy}>
          Create key
        </button>
      </form>
      <ErrorNotice error={error ?? list.error} />
      <div class="table-frame" aria-busy={list.loading}>
        <table class="list">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Role</th>
              <th scope="col" class="wide-only">
                Starts with
              </th>
              <th scope="col" class="wide-only">
                Scope
              </th>
              <th scope="col" class="wide-only">
                Created
              </th>
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {keys.map((k) => (
              <tr key={k.id} class={k.revoked_at ? 'revoked' : undefined}>
                <th scope="row">{k.name}</th>
                <td>{k.role}</td>
                <td class="wide-only">
                  <code>{k.key_prefix}…</code>
                </td>
                <td class="wide-only">{k.workspace_id === null ? 'organization' : 'workspace'}</td>
                <td class="wide-only">
                  <Time iso={k.created_at} />
                </td>
                <td>
                  {k.revoked_at ? (
                    <span class="muted">
                      revoked <Time iso={k.revoked_at} />
                    </span>
                  ) : (
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Revoke ${k.name}`}
                      onClick={() => void revoke(k.id, k.name)}
                    >
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {list.value && keys.length === 0 && <p class="empty">No keys.</p>}
      </div>
      <Pager offset={offset} shown={keys.length} limit={LIMIT} onOffset={setOffset} />
    </>
  );
}
