/**
 * The agent's own pace after failures, per loop and per deployment: a listener that cannot reach the
 * API server (or whose Kubernetes objects keep being refused, or the service) keeps trying, slower and
 * slower up to the cap, without many listeners retrying in lock-step. One request to the service is
 * retried by the SDK's fetch (@slipway/sdk's retrying-fetch.ts); this is the wait between the agent's
 * tries after those gave up.
 */
import { sleep as sdkSleep } from '@slipway/sdk/sleep';

export interface BackoffOptions {
  /** First delay, doubled after each failure in a row. */
  readonly baseMs: number;
  readonly maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, maxMs: 30_000 };

export interface Backoff {
  /** The delay before the next try; each call doubles the one after. */
  next(): number;
  reset(): void;
}

export function createBackoff(options: BackoffOptions): Backoff {
  let failures = 0;
  return {
    next() {
      const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** Math.min(failures, 30));
      failures += 1;
      // Between half and all of the ceiling.
      return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
    },
    reset() {
      failures = 0;
    },
  };
}

/**
 * Resolves after `ms`, or at once when `signal` aborts: the SDK's sleep, which never rejects here (the
 * agent's loops check the signal themselves).
 */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return sdkSleep(ms, signal).catch(() => undefined);
}
