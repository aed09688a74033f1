/**
 * The local runtime's record of work in flight and of files it must not remove.
 *
 * Nothing of an app may run while what it could write is removed (docs/data-plane.md): a teardown waits
 * for every build and start of the deployment still under way, a removal of a revision's files for that
 * revision's, and what some process could not be confirmed gone for (src/dataplane/process-runner.ts,
 * `leftover`) is never removed while this service runs. With the service's end those processes end too
 * (bubblewrap's --die-with-parent), and a later teardown removes it.
 */
import type { Logger } from 'pino';

export interface AppWorkTracking {
  /** Counts `work` as under way for the deployment and for the revision until it settles; returns it. */
  track<T>(deploymentId: string, revisionId: string, work: Promise<T>): Promise<T>;
  /** Settles once every build and start of the deployment under way now has ended (however it ended). */
  deploymentWorkEnded(deploymentId: string): Promise<void>;
  /** Settles once every build and start of the revision under way now has ended (however it ended). */
  revisionWorkEnded(revisionId: string): Promise<void>;
  /** Records what an app's supervisor could not confirm gone, for the deployment and the revision. */
  noteLeftovers(deploymentId: string, revisionId: string, supervisor: { leftovers: readonly string[] }): void;
  /** Keeps the files of the deployment and the revision: `what` (processes of a build) may still write them. */
  keepFiles(deploymentId: string, revisionId: string, what: string): void;
  /** Refuses to remove what the processes of `id` (a deployment or revision) may still write. */
  assertRemovable(id: string): void;
}

export function createAppWorkTracking(logger: Logger): AppWorkTracking {
  /**
   * Builds and starts under way, by deployment (a teardown waits for them to end before it removes
   * anything) and by `revision:<id>` (a removal of the revision's files waits for them).
   */
  const inFlight = new Map<string, Set<Promise<unknown>>>();
  /**
   * Deployments and revisions some of whose processes could not be confirmed gone, with what they are.
   *
   * In memory only, on purpose: it guards against processes of this service's own run, and none
   * outlives the run in a state that could use the lost guard. The data plane is made once per process
   * (src/main.ts; stopped only as the process ends), so its loss is a new process, and then:
   * - under bubblewrap every sandbox ends with the service (--die-with-parent SIGKILLs the sandbox's
   *   init, and the kernel then kills its whole PID namespace). What even that could not end was a
   *   process the kernel holds in an uninterruptible wait with SIGKILL pending: it never runs its own
   *   code again, so at most the one call it is in completes, and a swap of a directory for a link
   *   takes many calls timed against the walk;
   * - without bubblewrap (SLIPWAY_SANDBOX=none) a process that left its group and cgroup can outlive
   *   the service, but that mode contains nothing to begin with (the start log says so);
   * - either way the removal the guard holds back follows no link (coreutils' `rm -r
   *   --one-file-system`, src/dataplane/build-snapshot.ts), and a deployment's or build's image is
   *   unmounted (EBUSY while anything still holds it, and the deletion is tried again) and unlinked
   *   whole, walking nothing (src/dataplane/disk-limits.ts). The guard only keeps a tree that is
   *   still being written from being emptied under its writer.
   */
  const untouchable = new Map<string, string>();

  const ended = async (key: string): Promise<void> => {
    await Promise.all([...(inFlight.get(key) ?? [])]);
  };

  function keepFiles(deploymentId: string, revisionId: string, what: string): void {
    untouchable.set(deploymentId, what);
    untouchable.set(revisionId, what);
  }

  return {
    track(deploymentId, revisionId, work) {
      const settled = work.then(
        () => undefined,
        () => undefined,
      );
      // By deployment (a teardown waits for them) and by revision (a removal of its files waits for them:
      // pruning after a deploy, while an interrupted revision's build may still be being stopped).
      for (const key of [deploymentId, `revision:${revisionId}`]) {
        const set = inFlight.get(key) ?? new Set<Promise<unknown>>();
        inFlight.set(key, set);
        set.add(settled);
        void settled.then(() => {
          set.delete(settled);
          if (set.size === 0 && inFlight.get(key) === set) inFlight.delete(key);
        });
      }
      return work;
    },

    deploymentWorkEnded: (deploymentId) => ended(deploymentId),
    revisionWorkEnded: (revisionId) => ended(`revision:${revisionId}`),

    noteLeftovers(deploymentId, revisionId, supervisor) {
      if (supervisor.leftovers.length === 0) return;
      keepFiles(deploymentId, revisionId, supervisor.leftovers.join('; '));
      logger.error(
        { deploymentId, revisionId, leftovers: supervisor.leftovers },
        'processes of an app could not be confirmed gone: its files are kept until the service restarts',
      );
    },

    keepFiles,

    assertRemovable(id) {
      const what = untouchable.get(id);
      if (what)
        throw new Error(
          `${id}: processes that could write its files could not be confirmed gone (${what}); ` +
            'its files are kept until the service restarts',
        );
    },
  };
}
