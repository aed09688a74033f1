/**
 * What the cluster holds of the listener's, kept current by list-watch: one list and then one watch
 * per managed kind and watched namespace, filtered to the objects labelled managed-by the listener.
 * The controller reads a snapshot on every pass and is woken by `onChange`.
 *
 * A watch the server ends is resumed from the last resource version; a watch that expired (410 Gone)
 * or failed starts over with a fresh list after a back-off, so a flapping API server is not hammered.
 * Each namespace is watched on its own: `namespaces()` says, per namespace, whether every first list
 * is in. Before that an empty cache means "not read yet", not "nothing there", and the controller must
 * not act on the namespace's deployments (it would confirm deletions too early); deployments of the
 * other namespaces go on. A namespace whose list the API server forbids (403: the agent has no Role
 * there) is `refused`: waiting does not help until an operator grants it, so its deployments fail. The
 * lists are still retried (with back-off), and the namespace is watched as soon as one succeeds.
 *
 * A 403 is believed only once it is confirmed: an API server that has just started answers 403 to
 * everything until its authorization cache has synced (seen in 2 of 4 restarts of a real 1.26 control
 * plane, issue 25). So a stream's 403s make its namespace `refused` only after they have lasted
 * `forbiddenConfirmMs` without a list going through; until then the namespace stays as it was
 * (`watched` keeps what the cache holds, `starting` waits), and the list is retried within that time.
 */
import type { Logger } from 'pino';
import { KubeError, type KubeClient, type WatchEvent } from './kube-client.ts';
import { MANAGED_KINDS, keyOf, refOf, type ManagedKind, type ObservedObject } from './kube-objects.ts';
import { MANAGED_SELECTOR } from './manifest-names.ts';
import { createBackoff, sleep, type BackoffOptions } from './retry-backoff.ts';

/** Where the list-watch of one namespace stands. */
export type NamespaceWatch =
  /** Every managed kind is listed (a watch that failed since is being resumed: the cache holds what it had). */
  | { readonly state: 'watched' }
  /** Not every first list is in yet, and none has failed. */
  | { readonly state: 'starting' }
  /** A first list failed (the API server unreachable, 5xx, ...): tried again after a back-off. */
  | { readonly state: 'failing'; readonly reason: string }
  /** The API server forbids listing there (403): no Role for the agent in the namespace. */
  | { readonly state: 'refused'; readonly reason: string };

export interface ClusterCache {
  /** Every namespace of the options, in their order. */
  namespaces(): ReadonlyMap<string, NamespaceWatch>;
  snapshot(): ObservedObject[];
  /**
   * Lists and watches one more kind from now on (HTTPRoute, once the cluster serves the Gateway API).
   * Its first lists do not hold a watched namespace back: until they are in, the cache has none of it.
   */
  watchKind(kind: ManagedKind): void;
  /** Failures of the list-watch of watched namespaces (being retried), for the heartbeat; null when none. */
  problem(): string | null;
  stop(): Promise<void>;
}

export interface ClusterCacheOptions {
  readonly client: KubeClient;
  readonly namespaces: readonly string[];
  /** The kinds to list and watch: MANAGED_KINDS, and HTTPRoute where the cluster serves it. */
  readonly kinds?: readonly ManagedKind[];
  readonly onChange: () => void;
  /** A namespace's `NamespaceWatch` changed (for the heartbeat, which says which namespaces are watched). */
  readonly onNamespaces: () => void;
  readonly logger: Logger;
  readonly backoff: BackoffOptions;
  /** How long a namespace's lists must go on being answered 403 before it is taken as refused. */
  readonly forbiddenConfirmMs: number;
}

/** Long enough for an API server's authorization cache to sync after a start; short beside a rollout. */
export const DEFAULT_FORBIDDEN_CONFIRM_MS = 15_000;

/** A watch ended sooner than this after it started is treated like a failure: waits before the next. */
const SHORT_WATCH_MS = 1000;

export function startClusterCache(options: ClusterCacheOptions): ClusterCache {
  const { client, namespaces, onChange, onNamespaces, logger } = options;
  const objects = new Map<string, ObservedObject>();
  const stop = new AbortController();
  const aborts = new Set<() => void>();
  const streamsOf = (kind: ManagedKind, late: boolean) =>
    namespaces.map((namespace) => ({
      kind: kind.kind,
      namespace,
      /** Added after the start (`watchKind`): its first list is not waited for. */
      late,
      listed: false,
      /** The last failure of its list or watch, until a list succeeds again. */
      failure: null as { status: number; message: string } | null,
      /** When the 403s in a row began (ms since the epoch), until a list succeeds or another failure comes. */
      forbiddenSince: null as number | null,
    }));
  const streams = (options.kinds ?? MANAGED_KINDS).flatMap((kind) => streamsOf(kind, false));
  type Stream = (typeof streams)[number];

  const confirmedForbidden = (since: number) => Date.now() - since >= options.forbiddenConfirmMs;

  function watchOf(namespace: string): NamespaceWatch {
    const mine = streams.filter((s) => s.namespace === namespace);
    const forbidden = mine.find((s) => s.forbiddenSince !== null && confirmedForbidden(s.forbiddenSince));
    if (forbidden) return { state: 'refused', reason: forbidden.failure!.message };
    if (mine.every((s) => s.listed || s.late)) return { state: 'watched' };
    // A 403 not confirmed yet is no answer yet: the namespace is still starting.
    const failed = mine.find((s) => !s.listed && s.failure !== null && s.forbiddenSince === null);
    return failed ? { state: 'failing', reason: failed.failure!.message } : { state: 'starting' };
  }
  const current = () => new Map(namespaces.map((ns) => [ns, watchOf(ns)]));
  /** Each namespace's state as last told (JSON), to tell and log only a change. */
  const told = new Map(namespaces.map((ns) => [ns, JSON.stringify(watchOf(ns))]));
  /**
   * Records how a stream's list or watch went; tells the agent when a namespace's state changed (a
   * failure of a watched namespace does not change it). Logs once per change, not once per try (issue
   * 25: a namespace without a Role logged a warning per kind per back-off, 59 lines in 75 s): a failure
   * is logged when it is new for its stream, and not when another kind of the namespace already failed
   * with the same status; a namespace's new state is logged once.
   */
  function settle(stream: Stream, failure: { status: number; message: string } | null, listed: boolean) {
    const before = stream.failure;
    if (
      failure !== null &&
      (before?.status !== failure.status || before.message !== failure.message) &&
      !streams.some((s) => s !== stream && s.namespace === stream.namespace && s.failure?.status === failure.status)
    )
      logger.warn(
        { kind: stream.kind, namespace: stream.namespace, status: failure.status, err: failure.message },
        'list-watch failed; listing again after a back-off (logged once until it changes)',
      );
    stream.failure = failure;
    if (failure?.status !== 403) stream.forbiddenSince = null;
    else stream.forbiddenSince ??= Date.now();
    if (listed) stream.listed = true;
    let changed = false;
    for (const [namespace, watch] of current()) {
      const now = JSON.stringify(watch);
      if (told.get(namespace) === now) continue;
      told.set(namespace, now);
      changed = true;
      if (watch.state === 'watched') logger.info({ namespace }, 'namespace watched');
      else if (watch.state === 'refused')
        logger.error(
          { namespace, err: watch.reason },
          'namespace refused: the Kubernetes API server forbids the listener to list there; its deployments fail until it is granted the Role of deploy/role.yaml',
        );
      else if (watch.state === 'failing')
        logger.warn({ namespace, err: watch.reason }, 'namespace cannot be listed yet; its deployments wait');
    }
    if (changed) onNamespaces();
  }

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

  async function run(stream: Stream): Promise<void> {
    const { kind, namespace } = stream;
    const backoff = createBackoff(options.backoff);
    let resourceVersion = '';
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
          settle(stream, null, true);
          onChange();
        }
        const started = Date.now();
        resourceVersion = await watchOnce(kind, namespace, resourceVersion);
        if (Date.now() - started < SHORT_WATCH_MS) await sleep(backoff.next(), stop.signal);
        else backoff.reset();
      } catch (error) {
        if (stop.signal.aborted) return;
        const message = error instanceof Error ? error.message : String(error);
        const status = error instanceof KubeError ? error.status : 0;
        settle(stream, { status, message }, false);
        resourceVersion = '';
        // A 403 being confirmed is asked again before its window ends, so that it is confirmed (or
        // cleared) on time rather than a long back-off later.
        const confirming =
          stream.forbiddenSince === null ? null : stream.forbiddenSince + options.forbiddenConfirmMs - Date.now();
        const delay = backoff.next();
        await sleep(confirming !== null && confirming > 0 ? Math.min(delay, confirming) : delay, stop.signal);
      }
    }
  }

  const running = new Set(streams.map(run));

  return {
    namespaces: current,
    problem: () => {
      const failures = streams.filter((s) => s.failure !== null && s.listed).map((s) => s.failure!.message);
      return failures.length === 0 ? null : [...new Set(failures)].join('; ');
    },
    snapshot: () => [...objects.values()],
    watchKind(kind: ManagedKind) {
      if (stop.signal.aborted || streams.some((s) => s.kind === kind.kind)) return;
      const added = streamsOf(kind, true);
      streams.push(...added);
      for (const stream of added) running.add(run(stream));
    },
    async stop() {
      stop.abort();
      for (const abort of aborts) abort();
      await Promise.all(running);
    },
  };
}
