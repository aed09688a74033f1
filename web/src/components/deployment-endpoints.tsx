/**
 * A deployment's endpoints (docs/app-urls.md, "Endpoints" and "Traffic split"): each named address, the
 * revision it is pinned to and whether the data plane serves it yet, and its traffic split. A split is
 * started, widened, taken back or promoted here as through the API and the CLI; the service decides
 * (the same rules and refusals), and the panel shows its answer.
 */
import { useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import type { DeploymentEndpoint, Revision } from '../api/types.ts';
import { field } from '../forms.ts';
import { useApp, useInterval, useResource } from '../hooks.ts';
import { ErrorNotice, Notice } from './notice.tsx';

/** How often the list is read again while a move or a split is under way. */
const REFRESH_MS = 5_000;

const short = (id: string) => id.slice(0, 8);

function servingState(e: DeploymentEndpoint): string {
  if (e.served_revision_id === e.revision_id) return 'serving';
  return e.served_revision_id === null ? 'starting' : `moving from ${short(e.served_revision_id)}`;
}

interface RowProps {
  endpoint: DeploymentEndpoint;
  /** Revisions a split may send clients to: deployed ones of this deployment, on the page's list. */
  candidates: Revision[];
  act: (what: string, run: () => Promise<unknown>) => Promise<void>;
  busy: boolean;
}

function SplitControls({ endpoint: e, candidates, act, busy }: RowProps) {
  const { api } = useApp();
  const path = { deployment_id: e.deployment_id, endpoint_name: e.name };
  const split = e.split;
  if (split) {
    return (
      <form
        class="inline-form"
        aria-label={`Split of ${e.name}`}
        onSubmit={(event) => {
          event.preventDefault();
          const weight = Number(field(new FormData(event.currentTarget), 'weight'));
          void act(`The split of ${e.name} now sends ${weight}% of its clients to ${short(split.revision_id)}.`, () =>
            data(
              api.PUT('/v2/deployments/{deployment_id}/endpoints/{endpoint_name}/split', {
                params: { path },
                body: {
                  revision_id: split.revision_id,
                  weight,
                  ...(split.rollback ? { rollback: split.rollback } : {}),
                },
              }),
            ),
          );
        }}
      >
        <label>
          <span>Weight (%)</span>
          <input name="weight" type="number" min={1} max={99} step={1} required defaultValue={String(split.weight)} />
        </label>
        <button type="submit" disabled={busy}>
          Change weight
        </button>
        <button
          type="button"
          disabled={busy}
          onClick={() =>
            void act(`${e.name} moves to ${short(split.revision_id)}; the split ends.`, () =>
              data(
                api.PUT('/v2/deployments/{deployment_id}/endpoints/{endpoint_name}', {
                  params: { path },
                  body: { revision_id: split.revision_id },
                }),
              ),
            )
          }
        >
          Promote {short(split.revision_id)}
        </button>
        <button
          type="button"
          disabled={busy}
          onClick={() =>
            void act(`The split of ${e.name} is taken back: ${short(e.revision_id)} takes every client.`, () =>
              data(api.DELETE('/v2/deployments/{deployment_id}/endpoints/{endpoint_name}/split', { params: { path } })),
            )
          }
        >
          End split
        </button>
      </form>
    );
  }
  const others = candidates.filter((r) => r.id !== e.revision_id);
  if (others.length === 0) return <span class="muted">No other deployed revision to split with.</span>;
  return (
    <form
      class="inline-form"
      aria-label={`New split of ${e.name}`}
      onSubmit={(event) => {
        event.preventDefault();
        const form = new FormData(event.currentTarget);
        const revisionId = field(form, 'revision');
        const weight = Number(field(form, 'weight'));
        void act(`${e.name} sends ${weight}% of its clients to ${short(revisionId)} once it is healthy.`, () =>
          data(
            api.PUT('/v2/deployments/{deployment_id}/endpoints/{endpoint_name}/split', {
              params: { path },
              body: { revision_id: revisionId, weight, ...(form.get('rollback') ? { rollback: {} } : {}) },
            }),
          ),
        );
      }}
    >
      <label>
        <span>Revision</span>
        <select name="revision" required>
          {others.map((r) => (
            <option key={r.id} value={r.id}>
              {short(r.id)}
            </option>
          ))}
        </select>
      </label>
      <label>
        <span>Weight (%)</span>
        <input name="weight" type="number" min={1} max={99} step={1} required defaultValue="10" />
      </label>
      <label class="checkbox">
        <input name="rollback" type="checkbox" defaultChecked />
        <span>Take it back by itself if it does worse</span>
      </label>
      <button type="submit" disabled={busy}>
        Start split
      </button>
    </form>
  );
}

export function DeploymentEndpoints({ deploymentId, revisions }: { deploymentId: string; revisions: Revision[] }) {
  const { api } = useApp();
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const list = useResource(
    () =>
      data(
        api.GET('/v2/deployments/{deployment_id}/endpoints', { params: { path: { deployment_id: deploymentId } } }),
      ).then((page) => page.resources),
    [deploymentId],
  );
  const endpoints = list.value ?? [];
  const underWay = endpoints.some((e) => e.served_revision_id !== e.revision_id || (e.split && !e.split.served));
  useInterval(() => list.reload(), REFRESH_MS, underWay && list.error === null);
  const candidates = revisions.filter((r) => r.status === 'DEPLOYED');

  const act = async (what: string, run: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    setDone(null);
    try {
      await run();
      setDone(what);
    } catch (failure) {
      setError(failure);
    }
    setBusy(false);
    list.reload();
  };

  return (
    <>
      <ErrorNotice error={error ?? list.error} />
      {done && <Notice>{done}</Notice>}
      {list.value && endpoints.length === 0 && (
        <p class="muted">
          No endpoints. <code>slipway endpoints set</code> (or <code>PUT …/endpoints/&lt;name&gt;</code>) pins one to a
          revision.
        </p>
      )}
      {endpoints.map((e) => (
        <article key={e.name} class="endpoint" data-endpoint={e.name} aria-label={`Endpoint ${e.name}`}>
          <h3>{e.name}</h3>
          <dl class="facts">
            <div>
              <dt>URL</dt>
              <dd class="breakable">
                {e.url ? (
                  <a href={e.url} data-external rel="noreferrer" target="_blank">
                    {e.url}
                  </a>
                ) : (
                  <span class="muted">none</span>
                )}
              </dd>
            </div>
            <div>
              <dt>Revision</dt>
              <dd>
                <code>{short(e.revision_id)}</code> <span data-serving>{servingState(e)}</span>
              </dd>
            </div>
            <div>
              <dt>Split</dt>
              <dd data-split>
                {e.split ? (
                  <>
                    {e.split.weight}% to <code>{short(e.split.revision_id)}</code>,{' '}
                    {e.split.served ? 'serving' : e.split.not_served_reason ? 'not served' : 'starting'}
                    {e.split.rollback ? ', taken back by itself if it does worse' : ''}
                    {e.split.sticky ? '' : ', per request (no client or thread stays on a revision)'}
                    {!e.split.served && e.split.not_served_reason ? (
                      <div class="muted" data-split-reason>
                        {e.split.not_served_reason}
                      </div>
                    ) : null}
                  </>
                ) : (
                  <span class="muted">none</span>
                )}
              </dd>
            </div>
          </dl>
          <SplitControls endpoint={e} candidates={candidates} act={act} busy={busy} />
        </article>
      ))}
    </>
  );
}
