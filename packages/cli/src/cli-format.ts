/** Small formatters for human output: times as "3 min ago", states coloured by outcome. */
import type { Styles } from './cli-output.ts';

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86_400)} d ago`;
}

const GOOD = new Set(['DEPLOYED', 'READY', 'revision_created', 'online']);
const BAD = new Set([
  'CREATE_FAILED',
  'BUILD_FAILED',
  'DEPLOY_FAILED',
  'UNKNOWN',
  'INTERRUPTED',
  'rejected',
  'offline',
]);

/** A status in green (serving), red (failed or lost) or yellow (on its way). */
export function styleStatus(styles: Styles, status: string): string {
  const bare = status.trimEnd();
  if (GOOD.has(bare)) return styles.green(status);
  if (BAD.has(bare)) return styles.red(status);
  return styles.yellow(status);
}

export const orDash = (value: string | null | undefined): string =>
  value === null || value === undefined || value === '' ? '-' : value;
