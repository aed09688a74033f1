import type { DeploymentStatus, Listener, RevisionStatus } from '../api/types.ts';

/** A state as a coloured badge; the text is the state itself, so colour is never the only cue. */

type Tone = 'ok' | 'failed' | 'busy' | 'idle';

/**
 * Each revision and deployment status's tone, keyed by every status the API declares: a status added to
 * the service fails the type check here (after `npm run generate:client`) instead of showing as busy.
 */
const REVISION_TONES: Record<RevisionStatus, Tone> = {
  CREATING: 'busy',
  QUEUED: 'busy',
  AWAITING_BUILD: 'busy',
  BUILDING: 'busy',
  AWAITING_DEPLOY: 'busy',
  DEPLOYING: 'busy',
  CREATE_FAILED: 'failed',
  BUILD_FAILED: 'failed',
  DEPLOY_FAILED: 'failed',
  DEPLOYED: 'ok',
  SKIPPED: 'idle',
  INTERRUPTED: 'idle',
  UNKNOWN: 'failed',
};
const DEPLOYMENT_TONES: Record<DeploymentStatus, Tone> = {
  AWAITING_DATABASE: 'busy',
  READY: 'ok',
  UNUSED: 'idle',
  AWAITING_DELETE: 'idle',
  UNKNOWN: 'failed',
};
const LISTENER_TONES: Record<Listener['state'], Tone> = { connected: 'ok', stale: 'failed', never_seen: 'idle' };
const TONES: Record<string, Tone> = { ...REVISION_TONES, ...DEPLOYMENT_TONES, ...LISTENER_TONES };

export function StatusBadge({ status }: { status: string }) {
  const tone = Object.hasOwn(TONES, status) ? TONES[status] : 'busy';
  return <span class={`badge badge--${tone}`}>{status.replace(/_/g, ' ').toLowerCase()}</span>;
}
