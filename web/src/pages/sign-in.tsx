/**
 * Sign-in with an API key. The key is tried against the service before it is kept: an organization
 * admin key lists its workspaces to pick from; another organization key with several workspaces is
 * asked for the workspace id (it may not list them); a workspace key needs nothing more.
 */
import { useState } from 'preact/hooks';
import { createApi, data } from '../api/client.ts';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import type { Workspace } from '../api/types.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { field } from '../forms.ts';
import { PageTitle } from '../components/page-title.tsx';
import type { Session } from '../session.ts';
import { startSsoSignIn, type SsoStatus } from '../api/sso.ts';

type Step =
  { kind: 'key' } | { kind: 'pick'; apiKey: string; workspaces: Workspace[] } | { kind: 'enter'; apiKey: string };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

async function resolveKey(apiKey: string): Promise<Session | Step> {
  const api = createApi({ apiKey, workspaceId: null });
  try {
    const { resources } = await data(api.GET('/v2/workspaces', { params: { query: { limit: 100 } } }));
    const only = resources.length === 1 ? resources[0] : undefined;
    if (only) return { apiKey, person: null, workspace: { id: only.id, name: only.name }, workspaces: [] };
    return { kind: 'pick', apiKey, workspaces: resources };
  } catch (error) {
    // 403: a key of one workspace, or a member key of the organization: neither may list workspaces.
    if (!(error instanceof SlipwayError) || error.status !== 403) throw error;
  }
  try {
    await data(api.GET('/v2/deployments', { params: { query: { limit: 1 } } }));
    return { apiKey, person: null, workspace: null, workspaces: [] };
  } catch (error) {
    if (error instanceof SlipwayError && error.code === 'workspace_required') return { kind: 'enter', apiKey };
    throw error;
  }
}

/** Checks that the key may act in the workspace before keeping both. */
async function tryWorkspace(apiKey: string, workspaceId: string): Promise<void> {
  await data(createApi({ apiKey, workspaceId }).GET('/v2/deployments', { params: { query: { limit: 1 } } }));
}

interface SignInProps {
  onSignedIn: (session: Session) => void;
  reason: string | null;
  /** Single sign-on as the service has it; null when it could not say. */
  sso: SsoStatus | null;
}

export function SignIn({ onSignedIn, reason, sso }: SignInProps) {
  const [step, setStep] = useState<Step>({ kind: 'key' });
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = (work: () => Promise<void> | void) => async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await work();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };

  const form = (event: Event) => new FormData(event.target as HTMLFormElement);

  return (
    <main id="main" class="sign-in">
      <PageTitle title="Sign in to Slipway" />
      {reason && step.kind === 'key' && <p class="notice">{reason}</p>}
      {step.kind === 'key' && sso?.enabled && (
        <section class="sso" aria-label="Single sign-on">
          <button
            type="button"
            class="primary"
            disabled={busy}
            onClick={() =>
              void submit(() => startSsoSignIn(window.location.pathname + window.location.search))(new Event('click'))
            }
          >
            Sign in with {sso.provider_name ?? 'single sign-on'}
          </button>
          <p class="help">Or with an API key:</p>
        </section>
      )}
      {step.kind === 'key' && (
        <form
          onSubmit={(event) =>
            void submit(async () => {
              const apiKey = field(form(event), 'api-key');
              if (apiKey === '') throw new Error('Enter an API key.');
              const next = await resolveKey(apiKey);
              if ('kind' in next) setStep(next);
              else onSignedIn(next);
            })(event)
          }
        >
          <label for="api-key">API key</label>
          <input
            id="api-key"
            name="api-key"
            type="password"
            autocomplete="off"
            spellcheck={false}
            required
            aria-describedby="api-key-help"
          />
          <p id="api-key-help" class="help">
            A key made by the service (<code>slw_…</code>). It is kept in this tab only, until you sign out or close it.
          </p>
          <ErrorNotice error={error} />
          <button type="submit" class="primary" disabled={busy}>
            {busy ? 'Signing in…' : 'Sign in'}
          </button>
        </form>
      )}
      {step.kind === 'pick' && (
        <form
          onSubmit={(event) =>
            void submit(() => {
              const id = field(form(event), 'workspace');
              const chosen = step.workspaces.find((w) => w.id === id);
              if (!chosen) throw new Error('Choose a workspace.');
              onSignedIn({
                apiKey: step.apiKey,
                person: null,
                workspace: { id: chosen.id, name: chosen.name },
                workspaces: step.workspaces.map(({ id, name }) => ({ id, name })),
              });
            })(event)
          }
        >
          <fieldset>
            <legend>This organization key opens several workspaces. Which one?</legend>
            {step.workspaces.map((workspace, i) => (
              <label key={workspace.id} class="choice">
                <input type="radio" name="workspace" value={workspace.id} required defaultChecked={i === 0} />{' '}
                {workspace.name}
              </label>
            ))}
          </fieldset>
          <ErrorNotice error={error} />
          <button type="submit" class="primary" disabled={busy}>
            Open workspace
          </button>
        </form>
      )}
      {step.kind === 'enter' && (
        <form
          onSubmit={(event) =>
            void submit(async () => {
              const id = field(form(event), 'workspace-id').toLowerCase();
              if (!UUID.test(id)) throw new Error('A workspace id is a UUID, like 0b9e1c2d-….');
              await tryWorkspace(step.apiKey, id);
              onSignedIn({ apiKey: step.apiKey, person: null, workspace: { id, name: id }, workspaces: [] });
            })(event)
          }
        >
          <label for="workspace-id">Workspace id</label>
          <input
            id="workspace-id"
            name="workspace-id"
            autocomplete="off"
            spellcheck={false}
            required
            aria-describedby="workspace-help"
          />
          <p id="workspace-help" class="help">
            This organization key has several workspaces and may not list them: enter the id of the one to open (ask an
            administrator).
          </p>
          <ErrorNotice error={error} />
          <button type="submit" class="primary" disabled={busy}>
            Open workspace
          </button>
        </form>
      )}
      {step.kind !== 'key' && (
        <button type="button" class="link" onClick={() => setStep({ kind: 'key' })}>
          Use another key
        </button>
      )}
    </main>
  );
}
