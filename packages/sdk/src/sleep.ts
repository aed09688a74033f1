/**
 * Waiting that an abort ends early. Its own module, free of Node-only imports, because the dashboard
 * bundles the log follower (revision-follow.ts) that uses it.
 */
/** Waits `ms`, or rejects with the abort reason as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const reason = () => (signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
    if (signal?.aborted) return reject(reason());
    const onAbort = () => {
      clearTimeout(timer);
      reject(reason());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
