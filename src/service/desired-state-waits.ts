/**
 * Waking the listener protocol's desired-state long-polls (docs/listener-protocol.md): tells the
 * long-polls of each listener when a change may concern them, from the process's one change feed.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Change, ChangeFeed } from '../db/change-feed.ts';
import { listenerOfDeployment } from '../store/listeners.ts';
import type { Database } from '../store/schema.ts';

export interface DesiredStateWait {
  /** Resolves true when a change may concern the listener (or one came since the last call), false after `ms`. */
  next(ms: number): Promise<boolean>;
  close(): void;
}

interface Waiter {
  signalled: boolean;
  resolve: (() => void) | null;
}

/** Deployments whose listener is remembered; a listener never changes, so entries never go stale. */
const MAX_REMEMBERED_DEPLOYMENTS = 100_000;

/**
 * Routes the change feed's notifications to the long-polls of the listener they concern. A change
 * names a deployment; its listener is remembered (from the states the long-polls read, or looked up
 * once), so that a change of a local deployment or of another listener wakes nobody. A reconnected
 * feed may have missed changes: it wakes everyone.
 */
export function createDesiredStateWaits(options: {
  db: Kysely<Database>;
  changes: ChangeFeed | undefined;
  logger: Pick<Logger, 'warn'>;
}) {
  const { db, changes, logger } = options;
  const waiters = new Map<string, Set<Waiter>>();
  const listenerOf = new Map<string, string | null>();
  const lookups = new Map<string, Promise<void>>();

  const remember = (deploymentId: string, listenerId: string | null) => {
    if (listenerOf.has(deploymentId)) return;
    if (listenerOf.size >= MAX_REMEMBERED_DEPLOYMENTS) listenerOf.delete(listenerOf.keys().next().value!);
    listenerOf.set(deploymentId, listenerId);
  };

  const wakeWaiter = (waiter: Waiter) => {
    waiter.signalled = true;
    waiter.resolve?.();
  };
  const wake = (listenerId: string) => waiters.get(listenerId)?.forEach(wakeWaiter);
  const wakeAll = () => waiters.forEach((set) => set.forEach(wakeWaiter));

  const route = (deploymentId: string) => {
    const known = listenerOf.get(deploymentId);
    if (known !== undefined) {
      if (known !== null) wake(known);
      return;
    }
    if (lookups.has(deploymentId)) return;
    const lookup = listenerOfDeployment(db, deploymentId).then(
      (listenerId) => {
        // undefined: the deployment is gone and was never read by a long-poll here: nobody to wake.
        if (listenerId === undefined) return;
        remember(deploymentId, listenerId);
        if (listenerId !== null) wake(listenerId);
      },
      (error: unknown) => {
        logger.warn({ err: error }, 'could not tell which listener a change concerns; waking every long-poll');
        wakeAll();
      },
    );
    lookups.set(
      deploymentId,
      lookup.finally(() => lookups.delete(deploymentId)),
    );
  };

  const onChange = (change: Change) => {
    if (waiters.size === 0 || change.kind === 'log') return;
    if (change.kind === 'reconnected') wakeAll();
    else route(change.deployment_id);
  };
  const unsubscribe = changes?.subscribe(onChange);

  return {
    /** The feed is there: long-polls may sleep long between safety re-reads. */
    hasFeed: changes !== undefined,

    /** Deployments a long-poll read for the listener: their changes concern it. */
    remember(listenerId: string, deploymentIds: readonly string[]): void {
      for (const id of deploymentIds) remember(id, listenerId);
    },

    /** Starts listening for the listener's changes (before its state is read, so none is missed). */
    watch(listenerId: string): DesiredStateWait {
      const waiter: Waiter = { signalled: false, resolve: null };
      let set = waiters.get(listenerId);
      if (!set) waiters.set(listenerId, (set = new Set()));
      set.add(waiter);
      return {
        next: (ms) =>
          new Promise<boolean>((resolve) => {
            const finish = (woken: boolean) => {
              clearTimeout(timer);
              waiter.resolve = null;
              waiter.signalled = false;
              resolve(woken);
            };
            const timer = setTimeout(() => finish(false), ms);
            waiter.resolve = () => finish(true);
            if (waiter.signalled) finish(true);
          }),
        close: () => {
          set.delete(waiter);
          if (set.size === 0 && waiters.get(listenerId) === set) waiters.delete(listenerId);
          waiter.resolve?.();
        },
      };
    },

    /** Wakes every long-poll (the server is closing: they answer at once). */
    wakeAll,

    stop(): void {
      unsubscribe?.();
    },
  };
}
