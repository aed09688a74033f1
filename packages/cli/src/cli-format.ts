/** Small formatters for human output: times as "3 min ago", states coloured by outcome. */
import type { Deployment, RevisionStatus } from '@slipway/sdk/api-aliases';
import type { Styles } from './cli-output.ts';

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86_400)} d ago`;
}

type Tone = 'good' | 'bad' | 'busy';

/**
 * Each revision and deployment status's colour, keyed by every status the API declares: a status added
 * to the service fails the type check here (after `npm run generate:client`) instead of showing yellow.
 */
const REVISION_TONES: Record<RevisionStatus, Tone> = {
  CREATING: 'busy',
  QUEUED: 'busy',
  AWAITING_BUILD: 'busy',
  BUILDING: 'busy',
  AWAITING_DEPLOY: 'busy',
  DEPLOYING: 'busy',
  CREATE_FAILED: 'bad',
  BUILD_FAILED: 'bad',
  DEPLOY_FAILED: 'bad',
  DEPLOYED: 'good',
  SKIPPED: 'busy',
  INTERRUPTED: 'bad',
  UNKNOWN: 'bad',
};
const DEPLOYMENT_TONES: Record<Deployment['status'], Tone> = {
  AWAITING_DATABASE: 'busy',
  READY: 'good',
  UNUSED: 'busy',
  AWAITING_DELETE: 'busy',
  UNKNOWN: 'bad',
};
/** Listener states and a webhook delivery's outcomes. */
const OTHER_TONES: Record<string, Tone> = {
  revision_created: 'good',
  online: 'good',
  rejected: 'bad',
  offline: 'bad',
};
const TONES: Record<string, Tone> = { ...REVISION_TONES, ...DEPLOYMENT_TONES, ...OTHER_TONES };

/** A status in green (serving), red (failed or lost) or yellow (on its way). */
export function styleStatus(styles: Styles, status: string): string {
  const bare = status.trimEnd();
  const tone = Object.hasOwn(TONES, bare) ? TONES[bare] : 'busy';
  if (tone === 'good') return styles.green(status);
  if (tone === 'bad') return styles.red(status);
  return styles.yellow(status);
}

export const orDash = (value: string | null | undefined): string =>
  value === null || value === undefined || value === '' ? '-' : value;
