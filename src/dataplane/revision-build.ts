/**
 * Fetch and build: a revision's source goes into its own app directory under the data directory
 * (`revisions/<id>/app/src`), its app config is read, and its install and build commands run there,
 * sandboxed, with output in the revision's build log. A finished build is sealed (src/dataplane/
 * build-snapshot.ts: owned by the service, read-only) and leaves `revisions/<id>/build.json` (the resolved
 * app config), which is what a start, a restart after a service restart, or a redeploy reuses without
 * building again. Nothing here reads a tree that a running app can write: a redeploy copies a sealed
 * snapshot, never an app's directory.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { RegistrySettings } from '../config-registries.ts';
import type { AppConfig } from '../domain/app-config.ts';
import type { Source, SourceConfig, SourceRevisionConfig } from '../domain/sources.ts';
import type { RevisionSnapshot } from '../store/schema.ts';
import { AppConfigError, loadAppConfig } from './app-config-file.ts';
import { buildEnvironment } from './app-environment.ts';
import { ArchiveError } from './archive-error.ts';
import { extractTarball } from './archive-extraction.ts';
import { prepareBuildRegistries, RegistrySettingsError, type BuildRegistries } from './build-registries.ts';
import { copySnapshot, removeTree } from './build-snapshot.ts';
import type { BuildDisk } from './disk-limits.ts';
import { limitsFromResourceSpec, type DefaultLimits, type Limits } from './resource-limits.ts';
import { describeExit, runToEnd, type OutputSink } from './process-runner.ts';
import type { Sandbox } from './sandbox.ts';
import { inSpan } from '../telemetry/tracing.ts';

/** A revision that cannot go on: the failure status it moves to, a machine-readable reason, a message for the user. */
export class RevisionFailure extends Error {
  constructor(
    readonly status: 'BUILD_FAILED' | 'DEPLOY_FAILED',
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = 'RevisionFailure';
  }
}

/**
 * The failure reason of a revision some of whose processes could not be confirmed gone: the tree they
 * could write is left alone (never sealed, never removed) until the service restarts.
 */
export const PROCESSES_LEFT = 'processes_left';

/** The failure reason of a fork's preview on a data plane without a sandbox (`forkPreviewProblem`). */
export const FORK_PREVIEW_UNSANDBOXED = 'fork_preview_unsandboxed';

export interface RevisionDirs {
  root: string;
  /** Bound into the sandbox; holds `src` and `home`. */
  app: string;
  src: string;
  buildFile: string;
}

export function revisionDirs(dataDir: string, revisionId: string): RevisionDirs {
  const root = path.join(dataDir, 'revisions', revisionId);
  const app = path.join(root, 'app');
  return { root, app, src: path.join(app, 'src'), buildFile: path.join(root, 'build.json') };
}

export interface BuildRecord {
  appConfig: AppConfig;
  builtAt: string;
  /** The app directory was sealed when the build ended; only a sealed build is ever reused. */
  sealed?: boolean;
}

export async function readBuild(dirs: RevisionDirs): Promise<BuildRecord | null> {
  try {
    return JSON.parse(await fs.readFile(dirs.buildFile, 'utf8')) as BuildRecord;
  } catch {
    return null;
  }
}

/** Where the source comes from: the uploaded tarball, or the code host at the revision's ref. */
export interface SourceFetcher {
  /** Downloads the repository at `ref` to `destFile`; the resolved commit sha. */
  downloadRepository(
    deployment: BuildInput['deployment'],
    ref: string,
    destFile: string,
  ): Promise<{ commitSha: string }>;
}

export interface BuildInput {
  revisionId: string;
  source: Source;
  config: SourceRevisionConfig;
  snapshot: RevisionSnapshot;
  deployment: { id: string; workspace_id: string; source_config: SourceConfig };
  secrets: Record<string, string>;
}

export interface BuildHooks {
  /** The source is there and its config valid: the revision moves to BUILDING. */
  building(): Promise<void>;
  /** A codehost ref resolved to this commit. */
  commitResolved(sha: string): Promise<void>;
}

export interface BuildDeps {
  dataDir: string;
  sandbox: Sandbox;
  fetcher: SourceFetcher;
  /** Writes the workspace's upload `uploadPath` (a source_tarball_path) to `destFile`. */
  copyUpload(workspaceId: string, uploadPath: string, destFile: string): Promise<void>;
  /**
   * The deployment's own writable directory on the host (what an app sees at SLIPWAY_DATA_DIR); a pull
   * request's preview's own with `preview`.
   */
  deploymentDataDir(deploymentId: string, preview: number | null): string;
  /**
   * Limits of an app instance when its resource spec is silent; a build gets at least these too, and
   * never more than the operator's build maximum (`maximum.build`).
   */
  defaultLimits: DefaultLimits;
  /** The operator's package registries, CA bundle and proxies (src/dataplane/build-registries.ts). */
  registries: RegistrySettings;
  /**
   * The build's disk (src/dataplane/disk-limits.ts): where it writes (a file system of its own where
   * the service can mount one) and how its output is sealed.
   */
  disk: BuildDisk;
}

const stringOrNull = (value: unknown): string | null => (typeof value === 'string' && value !== '' ? value : null);

async function fetchSource(
  deps: BuildDeps,
  input: BuildInput,
  dirs: RevisionDirs,
  hooks: BuildHooks,
  log: OutputSink,
  signal: AbortSignal,
): Promise<void> {
  const archive = path.join(dirs.root, 'source.tar.gz');
  try {
    if (input.source === 'internal_source') {
      const upload = input.config.source_tarball_path;
      if (!upload)
        throw new RevisionFailure(
          'BUILD_FAILED',
          'source_missing',
          'The revision names no source_tarball_path: upload the source and patch the deployment with the path.',
        );
      log.system(`Extracting the uploaded source ${upload}`);
      await inSpan('fetch', { 'slipway.source': 'upload' }, () =>
        deps.copyUpload(input.deployment.workspace_id, upload, archive),
      );
      await inSpan('extract', {}, () => extractTarball(archive, dirs.src, { stripSingleTopDirectory: true, signal }));
    } else if (input.source === 'codehost') {
      // The commit the revision names when it names one (a push's `after`, a preview's head, an earlier
      // build's), else its ref: two quick pushes build their own commits, not twice the branch's head.
      const ref = input.config.repo_commit_sha ?? input.config.repo_ref;
      if (!ref) throw new RevisionFailure('BUILD_FAILED', 'source_missing', 'The revision names no repo_ref.');
      log.system(`Fetching ${String(input.deployment.source_config.repo_url)} at ${ref}`);
      const { commitSha } = await inSpan('fetch', { 'slipway.source': 'codehost' }, () =>
        deps.fetcher.downloadRepository(input.deployment, ref, archive),
      );
      await hooks.commitResolved(commitSha);
      log.system(`Resolved ${ref} to commit ${commitSha}`);
      await inSpan('extract', {}, () => extractTarball(archive, dirs.src, { stripSingleTopDirectory: true, signal }));
    } else {
      throw new RevisionFailure(
        'BUILD_FAILED',
        'source_not_buildable',
        `Source ${input.source} has nothing to build on this data plane.`,
      );
    }
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    if (error instanceof ArchiveError) throw new RevisionFailure('BUILD_FAILED', error.reason, error.message);
    if (error instanceof RevisionFailure) throw error;
    throw new RevisionFailure(
      'BUILD_FAILED',
      'source_fetch_failed',
      `Could not fetch the source: ${error instanceof Error ? error.message : String(error)}`,
    );
  } finally {
    await fs.rm(archive, { force: true });
  }
}

/**
 * Copies an earlier revision's sealed build (a redeploy); null when it is gone, or was never sealed (built
 * by an older version, whose app could write it: it is built again from its source instead).
 */
async function reuseBuild(
  deps: BuildDeps,
  fromRevisionId: string,
  dirs: RevisionDirs,
  log: OutputSink,
): Promise<BuildRecord | null> {
  const from = revisionDirs(deps.dataDir, fromRevisionId);
  const record = await readBuild(from);
  if (!record?.sealed) return null;
  log.system(`Reusing the build output of revision ${fromRevisionId}`);
  await copySnapshot(from.app, dirs.app, deps.sandbox.ids);
  return record;
}

/**
 * What a build may use: the revision's resource spec, but never less than an instance's defaults, nor
 * more than the operator's build maximum (config checks that it is at least the defaults).
 */
function buildLimits(deps: BuildDeps, input: BuildInput): Limits {
  const spec = limitsFromResourceSpec(
    input.snapshot.resource_spec,
    deps.defaultLimits,
    deps.defaultLimits.maximum?.build,
  );
  return {
    memoryBytes: Math.max(spec.memoryBytes, deps.defaultLimits.memoryBytes),
    cpu: Math.max(spec.cpu, deps.defaultLimits.cpu),
    pids: Math.max(spec.pids, deps.defaultLimits.pids),
  };
}

/** Runs the install and build commands, with the operator's registry settings; throws RevisionFailure. */
async function runBuildSteps(
  deps: BuildDeps,
  input: BuildInput,
  appConfig: AppConfig,
  dirs: RevisionDirs,
  registries: BuildRegistries,
  log: OutputSink & { tail(n: number): string[] },
  signal: AbortSignal,
): Promise<void> {
  // The app's own variables and secrets win over the operator's registry settings.
  const env = { ...registries.env, ...buildEnvironment(deps.sandbox.appPaths(dirs.app), appConfig.env, input.secrets) };
  const limits = buildLimits(deps, input);
  for (const line of registries.described) log.system(`Package registries: ${line}`);
  for (const [step, command] of [
    ['install', appConfig.install],
    ['build', appConfig.build],
  ] as const) {
    if (!command) continue;
    log.system(`Running the ${step} command: ${command}`);
    const exit = await inSpan(step, {}, () => {
      // Stopped before it starts (the worker stopping, the revision interrupted while the source was
      // fetched or the build's disk made): runToEnd only hears aborts that come once it runs, and the
      // command would otherwise run to its own end.
      signal.throwIfAborted();
      return runToEnd({
        sandbox: deps.sandbox,
        run: {
          purpose: 'build',
          command,
          appDir: dirs.app,
          limits,
          name: `build-${input.revisionId}-${step}`,
          forwards: registries.forwards,
          readOnly: registries.readOnly,
        },
        env,
        output: log,
        signal,
      });
    });
    if (exit.leftover) {
      // Something of the build may still write its directory: it is neither sealed nor removed
      // (the caller keeps it, src/dataplane/local-runtime.ts), and the revision fails, aborted or not.
      throw new RevisionFailure(
        'BUILD_FAILED',
        PROCESSES_LEFT,
        `The ${step} command's processes could not be confirmed gone (${exit.leftover}); its files are kept ` +
          `until the service restarts. Deploy again.`,
      );
    }
    signal.throwIfAborted();
    if (exit.code !== 0) {
      const tail = log.tail(20).join('\n');
      throw new RevisionFailure(
        'BUILD_FAILED',
        exit.outOfMemory ? 'out_of_memory' : 'build_command_failed',
        `The ${step} command \`${command}\` ${describeExit(exit)}. Fix it and deploy again.\nLast lines of output:\n${tail}`,
      );
    }
  }
}

/**
 * Why a pull request's preview from a fork may not run on this sandbox, or null when it may. Without
 * bubblewrap (SLIPWAY_SANDBOX=none, or `auto` where it is missing) an app is a bare process of its
 * deployment's host uid, a preview's too: a fork's code, which anyone may send, could open the deployment's
 * data directory by its host path beside its own (docs/codehost.md, "Pull-request previews"). Checked
 * before its build and before each start (a build made under bubblewrap, started after a restart without it).
 */
export function forkPreviewProblem(sandbox: Pick<Sandbox, 'kind'>, snapshot: RevisionSnapshot): string | null {
  if (sandbox.kind !== 'none' || snapshot.preview?.from_fork !== true) return null;
  return (
    `Pull request #${snapshot.preview.pull_request} comes from a fork, and this data plane runs apps without a ` +
    "sandbox (SLIPWAY_SANDBOX=none, or bubblewrap missing): its code would run as the deployment's own user and " +
    "could read the deployment's data. Fork previews need the sandbox (docs/operations.md); branches of the " +
    'repository itself still get previews.'
  );
}

/**
 * Builds the revision into a fresh app directory and records the build. Throws RevisionFailure with
 * the reason the user sees; an abort kills the running command and throws the signal's reason.
 */
export async function buildRevision(
  deps: BuildDeps,
  input: BuildInput,
  hooks: BuildHooks,
  log: OutputSink & { tail(n: number): string[] },
  signal: AbortSignal,
): Promise<BuildRecord> {
  const forkProblem = forkPreviewProblem(deps.sandbox, input.snapshot);
  if (forkProblem) throw new RevisionFailure('BUILD_FAILED', FORK_PREVIEW_UNSANDBOXED, forkProblem);
  const dirs = revisionDirs(deps.dataDir, input.revisionId);
  // An image an earlier attempt of this build left mounted (none of its processes run) goes first.
  await deps.disk.release();
  await removeTree(dirs.root, deps.sandbox.ids);
  await fs.mkdir(dirs.root, { recursive: true, mode: 0o755 });

  // A redeploy reuses the earlier build when the sandbox makes its paths portable (see sandbox.ts).
  const reuseFrom = stringOrNull(input.snapshot.reuse_build_of);
  if (reuseFrom && deps.sandbox.kind === 'bwrap') {
    const reused = await reuseBuild(deps, reuseFrom, dirs, log);
    if (reused) {
      await hooks.building();
      const record = { appConfig: reused.appConfig, builtAt: new Date().toISOString(), sealed: true };
      await fs.writeFile(dirs.buildFile, JSON.stringify(record));
      return record;
    }
    log.system(`The build output of revision ${reuseFrom} is gone; building again from its source`);
  }

  await deps.disk.prepare();
  let processesLeft = false;
  try {
    return await buildInto(deps, input, dirs, hooks, log, signal);
  } catch (error) {
    processesLeft = error instanceof RevisionFailure && error.reason === PROCESSES_LEFT;
    // A build whose own file system is full failed for that, whatever its last command said.
    if (error instanceof RevisionFailure && error.status === 'BUILD_FAILED' && !processesLeft)
      throw (await deps.disk.fullFailure()) ?? error;
    throw error;
  } finally {
    // Its processes are gone (else what they may write is kept, with its mount): its image goes.
    if (!processesLeft) await deps.disk.release();
  }
}

/** Fetches, builds and seals into the revision's app directory, ready to write; the build's record. */
async function buildInto(
  deps: BuildDeps,
  input: BuildInput,
  dirs: RevisionDirs,
  hooks: BuildHooks,
  log: OutputSink & { tail(n: number): string[] },
  signal: AbortSignal,
): Promise<BuildRecord> {
  await fetchSource(deps, input, dirs, hooks, log, signal);
  signal.throwIfAborted();
  let appConfig: AppConfig;
  try {
    const configPath = input.config.framework_config_path ?? 'slipway.json';
    appConfig = await loadAppConfig(
      dirs.src,
      configPath,
      {
        install_command: stringOrNull(input.snapshot.install_command),
        build_command: stringOrNull(input.snapshot.build_command),
      },
      `${deps.sandbox.appPaths(dirs.app, deps.deploymentDataDir(input.deployment.id, input.snapshot.preview?.pull_request ?? null)).data}/langgraph_api`,
    );
  } catch (error) {
    if (error instanceof AppConfigError) throw new RevisionFailure('BUILD_FAILED', error.reason, error.message);
    throw error;
  }
  await hooks.building();
  await deps.sandbox.ownTree(dirs.app, input.deployment.id);

  const registries = await prepareBuildRegistries(deps.registries, deps.sandbox, path.join(dirs.root, 'registry'), {
    own: (dir) => deps.sandbox.ownTree(dir, input.deployment.id),
    warn: (message) => log.system(message),
  }).catch((error: unknown) => {
    if (error instanceof RegistrySettingsError) throw new RevisionFailure('BUILD_FAILED', error.reason, error.message);
    throw error;
  });
  try {
    await runBuildSteps(deps, input, appConfig, dirs, registries, log, signal);
  } finally {
    await registries.close();
  }
  // The build could write /home/app: its src and home must still be directories, not links that would
  // lead an instance's read-only mount of them elsewhere on the host.
  for (const part of ['src', 'home']) {
    const stat = await fs.lstat(path.join(dirs.app, part)).catch(() => null);
    if (!stat?.isDirectory())
      throw new RevisionFailure(
        'BUILD_FAILED',
        'build_command_failed',
        `The build replaced /home/app/${part}, which must stay a directory: build into it, not over it.`,
      );
  }
  // The build's processes are gone (its PID namespace ended, its exit confirmed it): nothing writes it now.
  // A build that ended with its own file system full failed for that, as if its measure had stopped it.
  const full = await deps.disk.fullFailure();
  if (full) throw full;
  await deps.disk.seal();
  const record = { appConfig, builtAt: new Date().toISOString(), sealed: true };
  await fs.writeFile(dirs.buildFile, JSON.stringify(record));
  log.system('Build finished');
  return record;
}
