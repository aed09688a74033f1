/**
 * Building a revision on the own data plane: src/dataplane/revision-build.ts's build, run with the job's
 * secrets opened (and kept out of its log), its directory measured against the disk limit while it runs,
 * and processes it could not confirm gone kept track of, so the revision's files outlive them.
 */
import { openSecrets, type AppStarter } from './app-start.ts';
import type { RevisionJob } from './local-runtime-types.ts';
import {
  buildRevision,
  PROCESSES_LEFT,
  revisionDirs,
  RevisionFailure,
  type BuildHooks,
  type BuildRecord,
} from './revision-build.ts';
import { copyUpload } from './upload-source.ts';

export async function buildApp(
  starter: AppStarter,
  job: RevisionJob,
  hooks: BuildHooks,
  signal: AbortSignal,
): Promise<BuildRecord> {
  const { deps, access, tracking } = starter;
  const { config, db, sandbox } = deps;
  const log = starter.logWriter(
    job.revisionId,
    'build',
    Object.values(openSecrets(deps.secretBox, job.secrets)).filter((v) => v.length >= 4),
  );
  // The build's directory is measured while it runs: over its limit, the build is stopped and fails.
  const disk = new AbortController();
  const dirs = revisionDirs(config.dataDir, job.revisionId);
  const buildDisk = deps.disk.buildDisk(job.revisionId, dirs.root, dirs.app);
  const watch = buildDisk.watch(disk);
  try {
    return await buildRevision(
      {
        dataDir: config.dataDir,
        sandbox,
        fetcher: deps.fetcher,
        copyUpload: (workspaceId, uploadPath, destFile) =>
          copyUpload(db, config.dataDir, workspaceId, uploadPath, destFile),
        defaultLimits: config.defaultLimits,
        registries: config.buildRegistries,
        deploymentDataDir: (deploymentId, preview) => access.dataDirOf(deploymentId, preview),
        disk: buildDisk,
      },
      { ...job, secrets: openSecrets(deps.secretBox, job.secrets) },
      hooks,
      log,
      AbortSignal.any([signal, disk.signal]),
    );
  } catch (caught) {
    // Stopped for its disk: whatever the stop made the build throw, the failure is the disk's (unless
    // its processes could not be confirmed gone: what they may write is kept, below).
    const leftover = caught instanceof RevisionFailure && caught.reason === PROCESSES_LEFT;
    const error: unknown = disk.signal.aborted && !signal.aborted && !leftover ? disk.signal.reason : caught;
    // The first line only: the rest of a failure message quotes the log's own last lines (for
    // readers of the API), which the log has just above.
    if (error instanceof RevisionFailure) log.system(`Build failed: ${error.message.split('\n')[0]}`);
    if (error instanceof RevisionFailure && error.reason === PROCESSES_LEFT) {
      tracking.keepFiles(job.deployment.id, job.revisionId, error.message);
    }
    throw error;
  } finally {
    watch.stop();
    await log.close();
  }
}
