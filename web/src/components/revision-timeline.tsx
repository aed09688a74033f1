/** A deployment's revisions, newest first, with their states, times, failures and actions. */
import { isFinalRevision, type Revision } from '../api/types.ts';
import { Pager } from './pager.tsx';
import { StatusBadge } from './status-badge.tsx';
import { Time } from './time.tsx';

interface TimelineProps {
  deploymentId: string;
  revisions: Revision[] | undefined;
  activeRevisionId: string | null;
  latestRevisionId: string | null;
  offset: number;
  limit: number;
  onOffset: (offset: number) => void;
  onAction: (action: 'redeploy' | 'interrupt', revisionId: string) => Promise<void>;
  /** The instances the deployment runs now ("2 web"): a redeploy keeps them (docs/lifecycle.md). */
  instances: string;
}

/** What a redeploy of a revision brings back, and what it keeps (docs/lifecycle.md, "What a redeploy restores"). */
export const redeployRestores = (instances: string) =>
  `Restored from it: the source, secrets, install and build commands, cpu and memory. Kept: the instance count (${instances}).`;

function whatRan(r: Revision): string | null {
  const c = r.source_revision_config;
  if (c.image_uri) return c.image_uri;
  if (c.repo_ref) return c.repo_commit_sha ? `${c.repo_ref} @ ${c.repo_commit_sha.slice(0, 12)}` : c.repo_ref;
  if (c.source_tarball_path) return `archive ${c.source_tarball_path.replace(/^uploads\//, '')}`;
  return null;
}

export function RevisionTimeline({
  deploymentId,
  revisions,
  activeRevisionId,
  latestRevisionId,
  offset,
  limit,
  onOffset,
  onAction,
  instances,
}: TimelineProps) {
  if (revisions === undefined) return <p class="muted">Loading…</p>;
  if (revisions.length === 0 && offset === 0)
    return <p class="muted">No revisions yet: this deployment has no source to build.</p>;
  return (
    <>
      <ol class="timeline">
        {revisions.map((r) => {
          const final = isFinalRevision(r.status);
          const label = `revision ${r.id.slice(0, 8)}`;
          return (
            <li key={r.id} class={`revision revision--${final ? 'final' : 'running'}`} aria-label={label}>
              <div class="revision-head">
                <StatusBadge status={r.status} />
                <code>{r.id.slice(0, 8)}</code>
                {r.id === activeRevisionId && <span class="tag">serving</span>}
                {r.id === latestRevisionId && <span class="tag">latest</span>}
              </div>
              <p class="revision-times">
                Created <Time iso={r.created_at} /> · {final ? 'finished' : 'last change'} <Time iso={r.updated_at} />
              </p>
              {whatRan(r) && <p class="breakable muted">{whatRan(r)}</p>}
              {r.failure_reason && (
                <div class="failure">
                  <p>
                    <strong>{r.failure_reason.replace(/_/g, ' ')}</strong>
                  </p>
                  {r.failure_message && <pre>{r.failure_message}</pre>}
                </div>
              )}
              <div class="actions">
                <a
                  class="button"
                  href={`/deployments/${deploymentId}/revisions/${r.id}/logs`}
                  aria-label={`Logs of ${label}`}
                >
                  Logs
                </a>
                <button
                  type="button"
                  aria-label={`Redeploy ${label}`}
                  onClick={() =>
                    window.confirm(
                      `Redeploy ${label}? A new revision is made from what it ran. ${redeployRestores(instances)}`,
                    ) && void onAction('redeploy', r.id)
                  }
                >
                  Redeploy
                </button>
                {!final && (
                  <button
                    type="button"
                    class="danger"
                    aria-label={`Interrupt ${label}`}
                    onClick={() =>
                      window.confirm(`Interrupt ${label}? Its build or start stops now.`) &&
                      void onAction('interrupt', r.id)
                    }
                  >
                    Interrupt
                  </button>
                )}
              </div>
            </li>
          );
        })}
      </ol>
      <Pager offset={offset} shown={revisions.length} limit={limit} onOffset={onOffset} />
    </>
  );
}
