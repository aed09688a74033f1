/**
 * Why a deployment shows the status it shows, in words, for `slipway` and the dashboard. The status
 * values are the interface's and stay as they are, but some read as wrong on their own: a deployment
 * whose only revision failed to build, or whose listener never picked it up, is still
 * AWAITING_DATABASE (docs/lifecycle.md). This says what is really going on, from the deployment, its
 * latest revision and its listener. Pure: the callers fetch what `needs` asks for.
 */
import type { Deployment, Listener, Revision, RevisionStatus } from './api-aliases.ts';

type DeploymentFacts = Pick<Deployment, 'status' | 'active_revision_id' | 'latest_revision_id' | 'source_config'>;
type RevisionFacts = Pick<Revision, 'id' | 'status' | 'failure_reason' | 'failure_message'>;
type ListenerFacts = Pick<Listener, 'id' | 'compute_id' | 'state'>;

const FAILED: readonly RevisionStatus[] = ['CREATE_FAILED', 'BUILD_FAILED', 'DEPLOY_FAILED', 'INTERRUPTED', 'UNKNOWN'];
const MESSAGE_LENGTH = 160;

const short = (id: string) => id.slice(0, 8);

/** What explaining a deployment takes: its latest revision, and its listener. */
export function explanationNeeds(deployment: DeploymentFacts): { latestRevision: boolean; listener: boolean } {
  const settled = deployment.status === 'READY' && deployment.latest_revision_id === deployment.active_revision_id;
  return {
    latestRevision: !settled && deployment.status !== 'AWAITING_DELETE' && deployment.latest_revision_id !== null,
    listener: deployment.status === 'AWAITING_DATABASE' && typeof deployment.source_config.listener_id === 'string',
  };
}

/** The first line of a failure message, cut to a length a status line can carry. */
function firstLine(message: string | null): string | null {
  const line = message?.trim().split('\n')[0]?.trim();
  if (!line) return null;
  return line.length > MESSAGE_LENGTH ? `${line.slice(0, MESSAGE_LENGTH - 1)}…` : line;
}

/**
 * A sentence saying why the deployment has its status, or null when the status says it all (READY and
 * serving its latest revision, being deleted). `latest` and `listener` are what `explanationNeeds`
 * asked for (null when not asked for, or not found).
 */
export function explainStatus(
  deployment: DeploymentFacts,
  latest: RevisionFacts | null,
  listener: ListenerFacts | null,
): string | null {
  if (deployment.status === 'AWAITING_DELETE') return null;
  if (latest && latest.id === deployment.latest_revision_id && latest.id !== deployment.active_revision_id) {
    const serving = deployment.active_revision_id
      ? `; revision ${short(deployment.active_revision_id)} still serves`
      : '';
    if (FAILED.includes(latest.status)) {
      const message = firstLine(latest.failure_message);
      return (
        `latest revision ${short(latest.id)} ${latest.status}` +
        (latest.failure_reason ? ` (${latest.failure_reason})` : '') +
        (message ? `: ${message}` : '') +
        serving
      );
    }
    if (latest.status === 'SKIPPED') return null;
    if (deployment.status === 'AWAITING_DATABASE' && typeof deployment.source_config.listener_id === 'string')
      return waitingForListener(deployment.source_config.listener_id, listener);
    if (latest.status !== 'DEPLOYED') return `revision ${short(latest.id)} is ${latest.status}${serving}`;
  }
  if (deployment.status === 'AWAITING_DATABASE') {
    if (typeof deployment.source_config.listener_id === 'string')
      return waitingForListener(deployment.source_config.listener_id, listener);
    if (deployment.latest_revision_id === null) return 'no revision yet: nothing to build or run';
  }
  if (
    deployment.status === 'UNUSED' &&
    deployment.active_revision_id === null &&
    deployment.latest_revision_id === null
  )
    return 'no revision yet: nothing to build or run';
  return null;
}

function waitingForListener(listenerId: string, listener: ListenerFacts | null): string {
  if (!listener) return `waiting for listener ${short(listenerId)}`;
  const state =
    listener.state === 'never_seen'
      ? ', whose agent has never called in'
      : listener.state === 'stale'
        ? ', whose agent has stopped calling in'
        : '';
  return `waiting for listener ${listener.compute_id}${state}`;
}
