/**
 * Exponential back-off with jitter, shared by every loop of the agent that talks to something that
 * can fail (the service, the API server): a listener that cannot reach either keeps trying, slower
 * and slower up to the cap, without many listeners retrying in lock-step.
 */

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

/** Resolves after `ms`, or at once when `signal` aborts (never rejects: the caller checks the signal). */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
