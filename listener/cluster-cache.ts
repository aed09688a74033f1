/**
 * What the cluster holds of the listener's, kept current by list-watch: one list and then one watch
 * per managed kind and watched namespace, filtered to the objects labelled managed-by the listener.
 * The controller reads a snapshot on every pass and is woken by `onChange`.
 *
 * A watch the server ends is resumed from the last resource version; a watch that expired (410 Gone)
 * or failed starts over with a fresh list after a back-off, so a flapping API server is not hammered.
 * `synced()` is false until every first list is in: before that an empty cache means "not read yet",
 * not "nothing there", and the controller must not act on it (it would confirm deletions too early).
 */
import type { Logger } from 'pino';
import type { KubeClient, KubeError, WatchEvent } from './kube-client.ts';
import { MANAGED_KINDS, keyOf, refOf, type ObservedObject } from './kube-objects.ts';
import { MANAGED_SELECTOR } from './manifest-names.ts';
import { createBackoff, sleep, type BackoffOptions } from './retry-backoff.ts';

export interface ClusterCache {
  synced(): boolean;
  snapshot(): ObservedObject[];
  stop(): Promise<void>;
}

export interface ClusterCacheOptions {
  readonly client: KubeClient;
  readonly namespaces: readonly string[];
  readonly onChange: () => void;
  /** A failure of the list-watch, for the heartbeat's message; null once it works again. */
  readonly onProblem: (problem: string | null) => void;
  readonly logger: Logger;
  readonly backoff: BackoffOptions;
}

/** A watch ended sooner than this after it started is treated like a failure: waits before the next. */
const SHORT_WATCH_MS = 1000;

export function startClusterCache(options: ClusterCacheOptions): ClusterCache {
  const { client, namespaces, onChange, onProblem, logger } = options;
  const objects = new Map<string, ObservedObject>();
  const stop = new AbortController();
  const aborts = new Set<() => void>();
  let listed = 0;
  const streams = MANAGED_KINDS.flatMap((kind) => namespaces.map((namespace) => ({ kind: kind.kind, namespace })));

  const put = (object: ObservedObject) => objects.set(keyOf(refOf(object)), object);
  const drop = (object: ObservedObject) => objects.delete(keyOf(refOf(object)));

  /** Runs one watch to its end: the resource version to resume from, or '' to list again. */
  function watchOnce(kind: string, namespace: string, from: string): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      let resumeFrom = from;
      let gone = false;
      const onEvent = (event: WatchEvent) => {
        if (event.type === 'ERROR') {
          // 410: the resource version is too old to resume from; list again.
          if ((event.object as { code?: unknown }).code === 410) gone = true;
          return;
        }
        if (event.type === 'DELETED') drop(event.object);
        else if (event.type !== 'BOOKMARK') put(event.object);
        resumeFrom = event.object.metadata.resourceVersion ?? resumeFrom;
        if (event.type !== 'BOOKMARK') onChange();
      };
      let finished = false;
      let abortThis: (() => void) | undefined;
      const done = (error: KubeError | null) => {
        finished = true;
        if (abortThis) aborts.delete(abortThis);
        if (error === null || stop.signal.aborted) resolve(gone ? '' : resumeFrom);
        else if (error.status === 410) resolve('');
        else reject(error);
      };
      client.watch(kind, namespace, MANAGED_SELECTOR, from, onEvent, done).then((abort) => {
        if (finished) return;
        abortThis = abort;
        aborts.add(abort);
        if (stop.signal.aborted) abort();
      }, reject);
    });
  }

  async function run(kind: string, namespace: string): Promise<void> {
    const backoff = createBackoff(options.backoff);
    let resourceVersion = '';
    let first = true;
    while (!stop.signal.aborted) {
      try {
        if (resourceVersion === '') {
          const list = await client.list(kind, namespace, MANAGED_SELECTOR);
          if (stop.signal.aborted) return;
          for (const [key, object] of objects) {
            if (object.kind === kind && object.metadata.namespace === namespace) objects.delete(key);
          }
          list.items.forEach(put);
          resourceVersion = list.resourceVersion;
          if (first) {
            first = false;
            listed += 1;
          }
          onProblem(null);
          onChange();
        }
        const started = Date.now();
        resourceVersion = await watchOnce(kind, namespace, resourceVersion);
        if (Date.now() - started < SHORT_WATCH_MS) await sleep(backoff.next(), stop.signal);
        else backoff.reset();
      } catch (error) {
        if (stop.signal.aborted) return;
        const message = error instanceof Error ? error.message : String(error);
        logger.warn({ kind, namespace, err: message }, 'list-watch failed; listing again after a back-off');
        onProblem(message);
        resourceVersion = '';
        await sleep(backoff.next(), stop.signal);
      }
    }
  }

  const running = Promise.all(streams.map((s) => run(s.kind, s.namespace)));

  return {
    synced: () => listed === streams.length,
    snapshot: () => [...objects.values()],
    async stop() {
      stop.abort();
      for (const abort of aborts) abort();
      await running;
    },
  };
}
