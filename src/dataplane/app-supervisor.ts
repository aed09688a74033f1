/**
 * Supervises the processes of one running revision: `web` instances (each on its own port, health-
 * checked, routed to by the proxy) and optional background `worker` instances. A process that exits
 * while it should run is restarted with exponential back-off; every exit is reported through
 * `onExit`, so the caller can record it as an event and recognise a crash loop.
 */
import { freePort } from '../db/embedded-postgres.ts';
import { startProcess, type Exit, type OutputSink, type RunningProcess } from './process-runner.ts';
import type { Sandbox } from './sandbox.ts';

export interface InstanceSpec {
  kind: 'web' | 'worker';
  command: string;
}

export interface InstanceExit {
  instanceId: string;
  kind: 'web' | 'worker';
  exit: Exit;
  /** Crashes of this instance so far (this one included). */
  crashes: number;
  /** Milliseconds until the restart. */
  restartInMs: number;
}

export interface SupervisorOptions {
  sandbox: Sandbox;
  appDir: string;
  /** Environment of every instance; PORT is added per web instance. */
  env: Record<string, string>;
  output: OutputSink;
  instances: InstanceSpec[];
  healthCheckPath: string;
  onExit(exit: InstanceExit): void;
  /** Back-off bounds; tests shorten them. */
  backoff?: { initialMs: number; maxMs: number };
  /** A run at least this long resets the back-off. */
  stableAfterMs?: number;
}

interface Instance {
  id: string;
  kind: 'web' | 'worker';
  command: string;
  port: number | null;
  process: RunningProcess | null;
  crashes: number;
  startedAt: number;
  restartTimer: NodeJS.Timeout | null;
}

export interface AppSupervisor {
  /** Web instances' ports, for the proxy. */
  readonly webTargets: { instanceId: string; port: number }[];
  start(): Promise<void>;
  /**
   * Resolves when every web instance answers 2xx on the health path; rejects with the reason when
   * the time runs out, an instance exits first, or `signal` aborts.
   */
  waitHealthy(timeoutMs: number, signal: AbortSignal): Promise<void>;
  /** Whether every web instance is up and answers 2xx on the health path now. */
  healthy(): Promise<boolean>;
  /** SIGTERM to every instance, SIGKILL after `graceMs`; no restart after this. */
  stop(graceMs: number): Promise<void>;
}

export class HealthCheckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HealthCheckError';
  }
}

async function answers2xx(port: number, path: string): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      signal: AbortSignal.timeout(2_000),
      redirect: 'manual',
    });
    await response.body?.cancel();
    return response.status >= 200 && response.status < 300;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function createAppSupervisor(options: SupervisorOptions): AppSupervisor {
  const backoff = options.backoff ?? { initialMs: 1_000, maxMs: 30_000 };
  const stableAfterMs = options.stableAfterMs ?? 60_000;
  let stopped = false;
  const instances: Instance[] = options.instances.map((spec, index) => ({
    id: `${spec.kind}-${index}`,
    kind: spec.kind,
    command: spec.command,
    port: null,
    process: null,
    crashes: 0,
    startedAt: 0,
    restartTimer: null,
  }));

  const launch = (instance: Instance) => {
    const env = instance.port === null ? options.env : { ...options.env, PORT: String(instance.port) };
    instance.startedAt = Date.now();
    const running = startProcess({
      sandbox: options.sandbox,
      command: instance.command,
      appDir: options.appDir,
      env,
      output: options.output,
    });
    instance.process = running;
    void running.exited.then((exit) => {
      if (stopped || instance.process !== running) return;
      instance.process = null;
      if (Date.now() - instance.startedAt >= stableAfterMs) instance.crashes = 0;
      instance.crashes += 1;
      const restartInMs = Math.min(backoff.initialMs * 2 ** (instance.crashes - 1), backoff.maxMs);
      options.onExit({ instanceId: instance.id, kind: instance.kind, exit, crashes: instance.crashes, restartInMs });
      instance.restartTimer = setTimeout(() => {
        instance.restartTimer = null;
        if (!stopped) launch(instance);
      }, restartInMs);
    });
  };

  return {
    get webTargets() {
      return instances
        .filter((i) => i.kind === 'web' && i.port !== null)
        .map((i) => ({ instanceId: i.id, port: i.port! }));
    },

    async start() {
      for (const instance of instances) {
        if (instance.kind === 'web') instance.port = await freePort();
        launch(instance);
      }
    },

    async waitHealthy(timeoutMs, signal) {
      const started = Date.now();
      const deadline = started + timeoutMs;
      const pending = new Set(instances.filter((i) => i.kind === 'web'));
      while (pending.size > 0) {
        if (signal.aborted) throw new HealthCheckError('The deploy was interrupted.');
        for (const instance of [...pending]) {
          if (instance.crashes > 0) {
            throw new HealthCheckError(`The app exited before its health check passed (instance ${instance.id}).`);
          }
          if (await answers2xx(instance.port!, options.healthCheckPath)) pending.delete(instance);
        }
        if (pending.size === 0) return;
        if (Date.now() >= deadline) {
          throw new HealthCheckError(
            `The app did not answer 2xx on ${options.healthCheckPath} within ${Math.round(timeoutMs / 1000)} s.`,
          );
        }
        // Quick probes at first (most apps are up within a second), then gentler ones.
        await sleep(Date.now() - started < 2_000 ? 50 : 250);
      }
    },

    async healthy() {
      const web = instances.filter((i) => i.kind === 'web');
      const answers = await Promise.all(
        web.map(
          async (i) => i.process !== null && i.port !== null && (await answers2xx(i.port, options.healthCheckPath)),
        ),
      );
      return answers.every(Boolean) && instances.every((i) => i.process !== null);
    },

    async stop(graceMs) {
      stopped = true;
      await Promise.all(
        instances.map(async (instance) => {
          if (instance.restartTimer) clearTimeout(instance.restartTimer);
          instance.restartTimer = null;
          await instance.process?.stop(graceMs);
          instance.process = null;
        }),
      );
    },
  };
}
