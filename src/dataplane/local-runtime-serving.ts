/**
 * What serves each deployment on this machine (src/dataplane/local-runtime.ts): the running app a
 * deployment's stable URL is routed to, switched to a new one (`serve`), stopped for its disk or for good
 * (`stopForDisk`, `stop`), and what a stopped one held released. The state the runtime's parts share is
 * one `RuntimeState`, made at the runtime's start.
 */
import path from 'node:path';
import type { DeploymentConditionName } from '../domain/conditions.ts';
import { reportDiskFull } from './app-exit-reports.ts';
import type { AppHostAccess } from './app-host-access.ts';
import { REPLACED_CHANNEL, tellReplaced } from './app-replaced.ts';
import type { AppStarter, RunningApp } from './app-start.ts';
import type { AppWorkTracking } from './app-work-tracking.ts';
import type { TreeUsage } from './disk-usage.ts';
import type { createEndpointApps } from './endpoint-apps.ts';
import type { LocalRuntimeDeps } from './local-runtime-types.ts';

/** What the local runtime's parts share: its dependencies, the apps serving here and the changes under way. */
export interface RuntimeState {
  readonly deps: LocalRuntimeDeps;
  /** The running app of each deployment, the one its stable URL is routed to. */
  readonly apps: Map<string, RunningApp>;
  readonly access: AppHostAccess;
  /** Scale changes under way, by deployment: one at a time per app. */
  readonly scaling: Map<string, { app: RunningApp; work: Promise<void> }>;
  /** Stops under way, by deployment: a second stop (a teardown's) waits for the first to finish. */
  readonly stopping: Map<string, Promise<void>>;
  readonly tracking: AppWorkTracking;
  readonly starter: AppStarter;
  /** The instances serving the deployments' endpoints (src/dataplane/endpoint-apps.ts). */
  readonly endpointApps: ReturnType<typeof createEndpointApps<RunningApp>>;
}

/** A condition of the deployment: moves its status as the conditions' table says (src/domain/conditions.ts). */
export async function reportCondition(
  r: RuntimeState,
  deploymentId: string,
  condition: DeploymentConditionName,
  data: Record<string, unknown> = {},
): Promise<void> {
  await r.deps.reports.reportCondition({ deploymentId, condition, data });
}

/** Stops a running revision's processes and releases what it held. */
export async function release(r: RuntimeState, deploymentId: string, app: RunningApp): Promise<void> {
  app.diskWatch?.stop();
  await app.supervisor.stop(r.deps.config.drainTimeoutMs);
  // A scale-down of this app under way stops the instances it took out of the supervisor itself, and
  // the supervisor's stop does not wait for those: they may run for the whole drain time yet.
  const scale = r.scaling.get(deploymentId);
  if (scale?.app === app) await scale.work.catch(() => undefined);
  r.tracking.noteLeftovers(deploymentId, app.revisionId, app.supervisor);
  await r.access.closeForwards(app.forwards);
  await app.log.close();
}

/**
 * A serving app whose data and home directories went over their limit: its instances stop at once
 * (a second's grace: it writes for as long as it runs) and leave its route; its entry stays, so that
 * its runner lease is kept and nothing starts it again until a new revision serves.
 */
async function stopForDisk(r: RuntimeState, deploymentId: string, app: RunningApp, usage: TreeUsage): Promise<void> {
  const { deps } = r;
  if (r.apps.get(deploymentId) !== app) return;
  app.log.system('The data and home directories are over their disk limit: stopping every instance');
  app.stoppedBecause =
    `The app's instances were stopped because its data and home directories are full ` +
    `(${Math.round(deps.disk.appLimitBytes / 1024 ** 2)} MiB, SLIPWAY_APP_DISK_MB): it cannot be scaled. ` +
    'Deploy a revision that removes what it does not need at start.';
  await deps.edge.remove(app.slug, { drainTimeoutMs: 0 });
  await app.supervisor.stop(1000);
  // Its endpoints' instances write the same directories: they stop too, and stay stopped (local-runtime.ts).
  await r.endpointApps.stopAll(deploymentId);
  r.tracking.noteLeftovers(deploymentId, app.revisionId, app.supervisor);
  reportDiskFull(
    deps,
    { revisionId: app.revisionId, deployment: { id: deploymentId, workspace_id: app.workspaceId } },
    { limitBytes: deps.disk.appLimitBytes, ...usage },
  );
}

/**
 * Routes the stable URL to `next`, tells the revision that served before that it was replaced
 * (src/dataplane/app-replaced.ts), then drains and stops its instances.
 */
export async function serve(r: RuntimeState, deploymentId: string, next: RunningApp): Promise<void> {
  const { deps } = r;
  const previous = r.apps.get(deploymentId);
  r.apps.set(deploymentId, next);
  const root = path.dirname(next.dataDir);
  next.diskWatch ??= deps.disk.watchApp(root, [next.dataDir, path.join(root, 'home')], (usage) => {
    void stopForDisk(r, deploymentId, next, usage).catch((error: unknown) =>
      deps.logger.error({ err: error, deploymentId }, 'could not stop an app over its disk limit'),
    );
  });
  const replaced = previous && previous !== next && previous.revisionId !== next.revisionId ? previous : undefined;
  let told: Promise<void> | undefined;
  await deps.edge.setTargets(next.slug, next.supervisor.webTargets, {
    drainTimeoutMs: deps.config.drainTimeoutMs,
    // Told while its requests drain, not after: from the switch on, its instances take no new work.
    onSwitched: () => {
      if (replaced) told = tellRevisionReplaced(r, deploymentId, replaced, next.revisionId);
    },
  });
  // Told before it is stopped, too (a drain with nothing in flight ends at once).
  await told;
  if (previous && previous !== next) {
    previous.log.system(`Revision ${next.revisionId} serves now; stopping this one`);
    await release(r, deploymentId, previous);
  }
}

/**
 * Tells the replaced revision's instances that another serves (src/dataplane/app-replaced.ts), unless the
 * revision still serves one of the deployment's endpoints. Never fails: what could not be told is logged,
 * and its instances go on until they are stopped.
 */
async function tellRevisionReplaced(
  r: RuntimeState,
  deploymentId: string,
  replaced: RunningApp,
  by: string,
): Promise<void> {
  if (replaced.databaseUrl === null) return;
  const stillServing = r.endpointApps
    .all()
    .some((endpoint) => endpoint.deploymentId === deploymentId && endpoint.app.revisionId === replaced.revisionId);
  if (stillServing) return;
  try {
    await tellReplaced(replaced.databaseUrl, replaced.revisionId);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    replaced.log.system(
      `Could not tell this revision's instances that revision ${by} serves now (NOTIFY ${REPLACED_CHANNEL}: ${reason}); ` +
        'they take new work until they are stopped',
    );
    r.deps.logger.warn(
      { err: error, deploymentId, revisionId: replaced.revisionId },
      'could not notify a replaced revision',
    );
  }
}

/** Stops a deployment's app and its endpoints' instances, and takes its route away. */
export async function stop(r: RuntimeState, deploymentId: string): Promise<void> {
  const { deps, stopping } = r;
  // Its endpoints' instances go with it (a deletion, a lost runner lease, the service stopping).
  await r.endpointApps.stopAll(deploymentId);
  const app = r.apps.get(deploymentId);
  // Being stopped already (the runner heartbeat, say): done only when that stop is.
  if (!app) return stopping.get(deploymentId);
  r.apps.delete(deploymentId);
  const work = (async () => {
    await deps.edge.remove(app.slug, { drainTimeoutMs: deps.config.drainTimeoutMs });
    await release(r, deploymentId, app);
  })();
  const settled = work.then(
    () => undefined,
    () => undefined,
  );
  stopping.set(deploymentId, settled);
  void settled.then(() => {
    if (stopping.get(deploymentId) === settled) stopping.delete(deploymentId);
  });
  await work;
}
