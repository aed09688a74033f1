/**
 * One command under a sandbox mode of the local data plane, without the platform around it: the
 * sandbox, the resource control and the process runner of src/dataplane, made and used as the worker
 * makes and uses them (a build command with its cgroup and, when isolated, its network; an app with its
 * published port and its forward to the API), but timed by the bench to the first 2xx with a probe
 * every 10 ms. So what isolation costs per start is measured to about 10 ms, finer than the
 * supervisor's health probe (every 50 ms in an app's first 2 s) that rounds the deploy's start phase.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { freePort } from '../src/db/embedded-postgres.ts';
import { buildEnvironment } from '../src/dataplane/app-environment.ts';
import { openHostForward, type HostForward } from '../src/dataplane/host-forwards.ts';
import { runToEnd, startProcess, type OutputSink } from '../src/dataplane/process-runner.ts';
import { createResourceControl, DEFAULT_LIMITS } from '../src/dataplane/resource-limits.ts';
import { createSandbox, type Sandbox } from '../src/dataplane/sandbox.ts';

export type SandboxMode = 'none' | 'auto';

/** The command failed or did not answer: the sandbox's (or the command's) failure, not the bench's. */
export class SandboxedCommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxedCommandError';
  }
}

export interface BenchSandbox {
  mode: SandboxMode;
  /**
   * Whether this mode contains apps fully, judged as the service's start log judges it: bubblewrap, a
   * network namespace of its own, and cgroup limits.
   */
  contained: boolean;
  /** The sandbox's own description (the service's start log says the same). */
  description: string;
  /** `command` (a build step) run to its end in a copy of `source`; milliseconds. */
  timeCommand(source: string, command: string): Promise<number>;
  /**
   * `command` (an app) started from a sealed copy of `source` until GET `healthPath` on its published
   * port answers 2xx (probed every 10 ms); milliseconds. It is stopped afterwards. `apiPort` is where
   * its forward to the API leads (the service's port), as the platform gives every app one.
   */
  timeStart(source: string, command: string, healthPath: string, apiPort: number): Promise<number>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Output of the sandboxed commands: the last lines, for an error message. */
function tailSink(): OutputSink & { text(): string } {
  let text = '';
  const add = (chunk: Buffer | string) => (text = (text + String(chunk)).slice(-2_000));
  return { write: (_stream, chunk) => add(chunk), system: (line) => add(`${line}\n`), text: () => text.trim() };
}

/**
 * Whether GET http://127.0.0.1:port<path> answers 2xx (no keep-alive: each probe is a new connection,
 * as the platform's).
 */
export function answers2xx(port: number, pathname: string): Promise<boolean> {
  return new Promise((resolve) => {
    const request = http.get({ host: '127.0.0.1', port, path: pathname, agent: false, timeout: 1_000 }, (response) => {
      response.resume();
      response.on('end', () => resolve((response.statusCode ?? 0) >= 200 && (response.statusCode ?? 0) < 300));
      response.on('error', () => resolve(false));
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(false));
  });
}

/** A sandbox of the given mode, in a scratch directory of its own (removed on close). */
export async function openBenchSandbox(mode: SandboxMode): Promise<BenchSandbox> {
  const logger = pino({ level: 'silent' });
  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-sandbox-'));
  // The app's user (nobody, when the bench is root) passes through it, as through the data directory.
  await fs.chmod(work, 0o711);
  const hidden = path.join(work, 'hidden');
  await fs.mkdir(hidden);
  // A parent cgroup of its own, as each service has (named after its data directory).
  const limits = await createResourceControl({ logger, service: hidden });
  let sandbox: Sandbox;
  try {
    sandbox = await createSandbox({ mode, dataDir: hidden, limits, logger });
  } catch (error) {
    await limits.dispose();
    await fs.rm(work, { recursive: true, force: true });
    throw error;
  }
  const name = () => `bench-${randomBytes(6).toString('hex')}`;

  /** A fresh app directory: `src` (a copy of the source) and `home`, given to the app's user. */
  const appDir = async (source: string): Promise<string> => {
    const dir = path.join(work, name());
    await fs.mkdir(path.join(dir, 'home'), { recursive: true });
    await fs.cp(source, path.join(dir, 'src'), { recursive: true });
    await sandbox.ownTree(dir);
    return dir;
  };

  return {
    mode,
    contained: sandbox.kind === 'bwrap' && sandbox.networkIsolated && limits.kind !== 'none',
    description: sandbox.description,

    async timeCommand(source, command) {
      const dir = await appDir(source);
      const output = tailSink();
      try {
        const started = performance.now();
        const exit = await runToEnd({
          sandbox,
          run: { purpose: 'build', command, appDir: dir, limits: DEFAULT_LIMITS, name: name() },
          env: buildEnvironment(sandbox.appPaths(dir), {}, {}),
          output,
          signal: AbortSignal.timeout(60_000),
        });
        const ms = performance.now() - started;
        if (exit.code !== 0)
          throw new SandboxedCommandError(`\`${command}\` under SLIPWAY_SANDBOX=${mode}: ${output.text()}`);
        return ms;
      } finally {
        await fs.rm(dir, { recursive: true, force: true });
      }
    },

    async timeStart(source, command, healthPath, apiPort) {
      const dir = await appDir(source);
      const data = path.join(dir, 'data');
      await fs.mkdir(data);
      await sandbox.ownTree(data);
      const forwards: HostForward[] = [];
      if (sandbox.slirp) {
        const socketDir = path.join(sandbox.slirp.socketDir, randomBytes(12).toString('hex'));
        await fs.mkdir(socketDir, { mode: 0o711 });
        const target = { name: 'api', host: '127.0.0.1', port: apiPort, insidePort: apiPort, maxConnections: 64 };
        forwards.push(await openHostForward(socketDir, target, logger));
      }
      const port = await freePort();
      const output = tailSink();
      const env = {
        ...buildEnvironment(sandbox.appPaths(dir, data), {}, {}),
        HOST: sandbox.listenHost,
        PORT: String(port),
        SLIPWAY_API_URL: `http://127.0.0.1:${apiPort}`,
      };
      try {
        const started = performance.now();
        const running = startProcess({
          sandbox,
          run: {
            purpose: 'app',
            command,
            appDir: dir,
            dataDir: data,
            forwards,
            publishPort: port,
            limits: DEFAULT_LIMITS,
            name: name(),
          },
          env,
          output,
        });
        let exited = false;
        void running.exited.then(() => (exited = true));
        try {
          for (;;) {
            if (await answers2xx(port, healthPath)) return performance.now() - started;
            if (exited)
              throw new SandboxedCommandError(`\`${command}\` under SLIPWAY_SANDBOX=${mode} exited: ${output.text()}`);
            if (performance.now() - started > 30_000)
              throw new SandboxedCommandError(
                `\`${command}\` under SLIPWAY_SANDBOX=${mode} did not answer within 30 s`,
              );
            await sleep(10);
          }
        } finally {
          await running.stop(3_000);
        }
      } finally {
        for (const forward of forwards) await forward.close();
        await Promise.all(
          [...new Set(forwards.map((f) => path.dirname(f.socketPath)))].map((d) =>
            fs.rm(d, { recursive: true, force: true }),
          ),
        );
        await fs.rm(dir, { recursive: true, force: true });
      }
    },

    async close() {
      await sandbox.dispose();
      await limits.dispose();
      await fs.rm(work, { recursive: true, force: true });
    },
  };
}
