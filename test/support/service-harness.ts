/**
 * The real service as an operator runs it (`npm start`), for the process tests (test/ops/ and
 * test/ops/service-process.test.ts): spawned as a child process on a data directory of the test's, with
 * its own embedded PostgreSQL, and cleaned up after.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { entryCommand } from '../../scripts/test-bundles.ts';
import { fetchApi, freePort, ROOT } from './harness.ts';
import { unmountUnder } from './mounts.ts';
import { eventually } from './wait.ts';

export { ROOT };
export const START_DEADLINE_MS = 60_000;
export const STOP_DEADLINE_MS = 30_000;

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Service {
  child: ChildProcess;
  port: number;
  base: string;
  stdout(): string;
  stderr(): string;
  exited: Promise<Exit>;
}

const started: Service[] = [];
const dataDirs: string[] = [];

/** The environment of a user's shell, without what would point the service at the test database. */
export function serviceEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of Object.keys(env)) {
    if (
      name === 'DATABASE_URL' ||
      name.startsWith('SLIPWAY_') ||
      name === 'NODE_TEST_CONTEXT' ||
      name === 'PORT' ||
      name === 'HOST'
    )
      delete env[name];
  }
  return { ...env, ...extra };
}

export async function makeDataDir(): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-ops-'));
  dataDirs.push(dir);
  return dir;
}

export interface SpawnOptions {
  /** Its own process group, as a terminal's foreground job: a signal to -pid reaches all of it. */
  group?: boolean;
  /** A script other than the service (scripts/rotate-key.ts). */
  script?: string;
  args?: string[];
}

/** The service as this run bundled it (scripts/test-bundles.ts), or the script given, with tsx. */
function scriptCommand(script: string | undefined): string[] {
  return script === undefined ? entryCommand('src/main.ts') : ['--import', 'tsx', script];
}

export function spawnService(env: Record<string, string>, options: SpawnOptions = {}): Service {
  const port = Number(env.PORT ?? 0);
  const child = spawn(process.execPath, [...scriptCommand(options.script), ...(options.args ?? [])], {
    cwd: ROOT,
    // The app edge on a free port of its own unless the test names one (PORT + 1 may be taken here).
    env: serviceEnv({ LOG_LEVEL: 'warn', SLIPWAY_APPS_PORT: '0', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.group === true,
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const service = { child, port, base: `http://127.0.0.1:${port}`, stdout: () => stdout, stderr: () => stderr, exited };
  started.push(service);
  return service;
}

export async function withDeadline<T>(what: string, promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms)),
  );
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Starts the service on `dataDir` and waits until /readyz answers 200. */
export async function startService(
  dataDir: string,
  env: Record<string, string> = {},
  options: SpawnOptions = {},
): Promise<Service> {
  const port = env.PORT ? Number(env.PORT) : await freePort();
  const service = spawnService({ SLIPWAY_DATA_DIR: dataDir, ...env, PORT: String(port) }, options);
  let gone: Exit | null = null;
  void service.exited.then((status) => (gone = status));
  await eventually(
    'the service to be ready',
    async () => {
      if (gone)
        assert.fail(
          `the service exited during start (${JSON.stringify(gone)}): ${service.stderr()}\n${service.stdout()}`,
        );
      // Not listening yet: poll again until the deadline.
      const res = await fetch(`${service.base}/readyz`, { signal: AbortSignal.timeout(2_000) }).catch(() => null);
      return res?.status === 200;
    },
    { seconds: START_DEADLINE_MS / 1000, everyMs: 200, describe: () => service.stderr() },
  );
  return service;
}

/** Runs a process to its end (a start that must refuse, a script). */
export async function runToExit(
  env: Record<string, string>,
  options: SpawnOptions = {},
): Promise<Exit & { stdout: string; stderr: string }> {
  const service = spawnService(env, options);
  const exit = await withDeadline('exit', service.exited, START_DEADLINE_MS);
  return { ...exit, stdout: service.stdout(), stderr: service.stderr() };
}

export async function stop(service: Service, signal: NodeJS.Signals = 'SIGTERM'): Promise<Exit> {
  service.child.kill(signal);
  return withDeadline(`exit after ${signal}`, service.exited, STOP_DEADLINE_MS);
}

/** A JSON request to the service with `key`, over real HTTP. */
export function call(service: Service, method: string, url: string, key: string, body?: unknown) {
  return fetchApi(service.base, { key, timeoutMs: 10_000 })(method, url, body);
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function postgresPid(dataDir: string): Promise<number | null> {
  const content = await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').catch(() => null);
  const pid = content === null ? NaN : Number(content.split('\n')[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** The JSON log lines of a service's stdout. */
export function logLines(stdout: string): Record<string, unknown>[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** Stragglers: every process this file started, then a database server one of them may have left. */
export async function cleanUp(): Promise<void> {
  for (const service of started) {
    if (service.child.exitCode === null && service.child.signalCode === null) {
      // A process started in its own group: the group, so its children go too.
      if (service.child.pid !== undefined) {
        try {
          process.kill(-service.child.pid, 'SIGKILL');
        } catch {
          service.child.kill('SIGKILL');
        }
      }
    }
  }
  for (const dir of dataDirs) {
    const pid = await postgresPid(dir);
    if (pid !== null && alive(pid)) {
      process.kill(pid, 'SIGQUIT');
      const gone = await eventually('the leftover database server to quit', () => !alive(pid), { seconds: 10 }).then(
        () => true,
        () => false,
      );
      if (!gone) process.kill(pid, 'SIGKILL');
    }
    await unmountUnder(dir);
    await fs.rm(dir, { recursive: true, force: true });
  }
}
