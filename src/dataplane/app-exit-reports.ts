/**
 * What the local runtime reports when a serving app's instance exits, all through the data plane's
 * reports (src/domain/data-plane.ts), whose rules the lifecycle applies: every exit is a fact
 * (`deployment.app_exited`), and a crash loop a condition that makes the deployment UNKNOWN; so is an
 * app stopped for going over its disk limit (`deployment.disk_full`). Nothing is written here.
 */
import type { Logger } from 'pino';
import type { OwnPlaneReports, DeploymentFactType } from '../domain/data-plane.ts';
import type { InstanceExit } from './app-supervisor.ts';
import type { LogWriter } from './log-writer.ts';
import { describeExit } from './process-runner.ts';

/** Crashes of one instance, back to back, after which the deployment is reported UNKNOWN. */
const CRASH_LOOP_THRESHOLD = 5;

/** The app an exit is of. */
export interface ExitedApp {
  revisionId: string;
  deployment: { id: string; workspace_id: string };
}

export interface AppExitReportsDeps {
  reports: OwnPlaneReports;
  logger: Logger;
}

/** Reports a fact about the app's deployment: the lifecycle records it as the deployment's event. */
function reportAppFact(
  deps: AppExitReportsDeps,
  app: ExitedApp,
  type: Extract<DeploymentFactType, 'deployment.app_exited' | 'deployment.disk_full'>,
  data: Record<string, unknown>,
): Promise<unknown> {
  return deps.reports.reportFact({
    deploymentId: app.deployment.id,
    workspaceId: app.deployment.workspace_id,
    type,
    data,
  });
}

/**
 * Says an instance's exit in the revision's deploy log and, when the revision is what serves the
 * deployment (`serving`), records it as an event; the crash loop's UNKNOWN follows. Never throws: a
 * failure to record is logged (the supervisor restarts the instance either way).
 */
export function reportAppExit(
  deps: AppExitReportsDeps,
  app: ExitedApp,
  log: LogWriter,
  exit: InstanceExit,
  serving: boolean,
): void {
  const how = describeExit(exit.exit);
  log.system(
    `Instance ${exit.instanceId} ${how}; restarting in ${Math.round(exit.restartInMs / 1000)} s (crash ${exit.crashes})`,
  );
  if (!serving) return;
  const deploymentId = app.deployment.id;
  const data = {
    revision_id: app.revisionId,
    instance: exit.instanceId,
    exit_code: exit.exit.code,
    signal: exit.exit.signal,
    ...(exit.exit.outOfMemory ? { reason: 'out_of_memory', memory_limit_bytes: exit.exit.memoryLimitBytes } : {}),
    crashes: exit.crashes,
    restart_in_ms: exit.restartInMs,
  };
  void (async () => {
    await reportAppFact(deps, app, 'deployment.app_exited', data);
    if (exit.crashes >= CRASH_LOOP_THRESHOLD) {
      await deps.reports.reportCondition({
        deploymentId,
        condition: 'crash_loop',
        data: {
          revision_id: app.revisionId,
          message:
            `Instance ${exit.instanceId} of revision ${app.revisionId} crashed ${exit.crashes} ` +
            `times in a row; it keeps being restarted. Read its deploy log.`,
        },
      });
    }
  })().catch((error: unknown) => deps.logger.error({ err: error, deploymentId }, 'could not record an app exit'));
}

/**
 * Records that the serving app's writable directories went over their limit and its instances were
 * stopped (src/dataplane/disk-limits.ts): the event `deployment.disk_full`, and the deployment UNKNOWN
 * until a revision that stays within the limit serves. Never throws, as above.
 */
export function reportDiskFull(
  deps: AppExitReportsDeps,
  app: ExitedApp,
  disk: { limitBytes: number; bytes: number; unreadable: boolean; fileSystemFull?: boolean },
): void {
  const deploymentId = app.deployment.id;
  const limitMb = Math.round(disk.limitBytes / 1024 ** 2);
  const usedMb = Math.ceil(disk.bytes / 1024 ** 2);
  const message =
    (disk.unreadable
      ? `The app made part of its data or home directory unreadable to the service, which counts as over its limit of ${limitMb} MiB`
      : disk.fileSystemFull
        ? `The app's data and home directories filled their file system of ${limitMb} MiB (${usedMb} MiB held; its writes fail with ENOSPC)`
        : `The app's data and home directories hold ${usedMb} MiB, over their limit of ${limitMb} MiB`) +
    ` (SLIPWAY_APP_DISK_MB): its instances were stopped. Deploy a revision that removes what it does not need at start.`;
  void (async () => {
    await reportAppFact(deps, app, 'deployment.disk_full', {
      revision_id: app.revisionId,
      limit_bytes: disk.limitBytes,
      used_bytes: disk.bytes,
      unreadable: disk.unreadable,
      message,
    });
    await deps.reports.reportCondition({
      deploymentId,
      condition: 'disk_full',
      data: { revision_id: app.revisionId, message },
    });
  })().catch((error: unknown) => deps.logger.error({ err: error, deploymentId }, 'could not record a full app disk'));
}
