/** A state as a coloured badge; the text is the state itself, so colour is never the only cue. */

const TONES: Record<string, 'ok' | 'failed' | 'busy' | 'idle'> = {
  DEPLOYED: 'ok',
  READY: 'ok',
  connected: 'ok',
  CREATE_FAILED: 'failed',
  BUILD_FAILED: 'failed',
  DEPLOY_FAILED: 'failed',
  UNKNOWN: 'failed',
  stale: 'failed',
  SKIPPED: 'idle',
  INTERRUPTED: 'idle',
  UNUSED: 'idle',
  never_seen: 'idle',
  AWAITING_DELETE: 'idle',
};

export function StatusBadge({ status }: { status: string }) {
  const tone = TONES[status] ?? 'busy';
  return <span class={`badge badge--${tone}`}>{status.replace(/_/g, ' ').toLowerCase()}</span>;
}
