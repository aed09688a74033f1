/**
 * Supervises the processes of one running revision: `web` instances (each on its own port, health-
 * checked, routed to by the proxy) and optional background `worker` instances. A process that exits
 * while it should run is restarted with exponential back-off; every exit is reported through
 * `onExit`, so the caller can record it as an event and recognise a crash loop. Instances can be
 * added and removed while the revision runs (a changed resource spec is applied in place).
 */
import { freeAppPort } from './app-ports.ts';
import { startProcess, type Exit, type OutputSink, type RunningProcess } from './process-runner.ts';
import type { Sandbox, SandboxRun } from './sandbox.ts';
import type { Usage } from './resource-limits.ts';
import {
  healthCheckMissed,
  HealthCheckError,
  portHeldMessage,
  probe,
  answeredByItself,
  type Probe,
} from './app-health-check.ts';

export { HealthCheckError } from './app-health-check.ts';

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
  /** What every instance runs with: the sealed app directory, the deployment's data directory, forwards. */
  run: Pick<SandboxRun, 'appDir' | 'dataDir' | 'forwards'>;
  /** Resource limits of each instance, by kind. */
  limits: Record<'web' | 'worker', SandboxRun['limits']>;
  /** Prefix of the instances' cgroup names (unique per running revision). */
  name: string;
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
  /** The revision the instances run: the edge's targets carry it (the series per revision). */
  revisionId?: string;
}

/** One instance as the per-deployment metrics show it. */
export interface InstanceStats {
  instanceId: string;
  kind: 'web' | 'worker';
  /** Times it exited while it should run, and was started again (counter). */
  restarts: number;
  /** CPU seconds since its current process started (a counter that restarts with it), and memory now. */
  usage: Usage;
}

interface Instance {
  id: string;
  /** Not offered to the proxy until its health check has passed once. */
  pending: boolean;
  kind: 'web' | 'worker';
  command: string;
  port: number | null;
  process: RunningProcess | null;
  /**
   * The users its processes were last seen running as (RunningProcess.users): on a network shared with
   * the host, whose listener on its port counts as the instance's. Kept across an exit, which a probe
   * may meet before the exit is noticed.
   */
  users: number[];
  crashes: number;
  /** Exits while it should run, never reset (crashes is, after a stable run). */
  restarts: number;
  startedAt: number;
  restartTimer: NodeJS.Timeout | null;
}

export interface AppSupervisor {
  /** Ports of the web instances whose health check has passed, for the proxy. */
  readonly webTargets: { instanceId: string; port: number }[];
  /** Ids of the instances of a kind that run or are being restarted, oldest first. */
  instanceIds(kind: 'web' | 'worker'): string[];
  start(): Promise<void>;
  /**
   * Resolves when every web instance (or those of `only`) answers 2xx on the health path; rejects
   * with the reason when the time runs out, an instance exits first, or `signal` aborts.
   */
  waitHealthy(timeoutMs: number, signal: AbortSignal, only?: readonly string[]): Promise<void>;
  /** Starts `count` more instances of a kind; resolves to their ids (web ones wait for their health check). */
  add(spec: InstanceSpec, count: number): Promise<string[]>;
  /** Stops these instances for good (SIGTERM, SIGKILL after `graceMs`); the others keep running. */
  remove(instanceIds: readonly string[], graceMs: number): Promise<void>;
  /** Whether every web instance is up and answers 2xx on the health path now. */
  healthy(): Promise<boolean>;
  /**
   * SIGTERM to every instance, SIGKILL after `graceMs`; no restart after this. Resolves when every
   * process is gone, or could not be confirmed gone: then `leftovers` says which.
   */
  stop(graceMs: number): Promise<void>;
  /**
   * Processes of its instances that could not be confirmed gone when they exited or were stopped (empty
   * in practice); while there are any, nothing the app could write may be touched.
   */
  readonly leftovers: readonly string[];
  /** Restarts and resource usage of each instance. */
  stats(): Promise<InstanceStats[]>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The `index`th instance of its kind, not started yet (a web one is not offered to the proxy before its health check). */
function newInstance(spec: InstanceSpec, index: number): Instance {
  return {
    id: `${spec.kind}-${index}`,
    pending: spec.kind === 'web',
    kind: spec.kind,
    command: spec.command,
    port: null,
    process: null,
    users: [],
    crashes: 0,
    restarts: 0,
    startedAt: 0,
    restartTimer: null,
  };
}

/** Stops an instance's process for good: no restart pending, SIGTERM, SIGKILL after `graceMs`. */
async function stopInstance(instance: Instance, graceMs: number): Promise<void> {
  if (instance.restartTimer) clearTimeout(instance.restartTimer);
  instance.restartTimer = null;
  await instance.process?.stop(graceMs);
  instance.process = null;
}

export function createAppSupervisor(options: SupervisorOptions): AppSupervisor {
  const backoff = options.backoff ?? { initialMs: 1_000, maxMs: 30_000 };
  const stableAfterMs = options.stableAfterMs ?? 60_000;
  let stopped = false;
  const leftovers: string[] = [];
  /** Starts so far, so that each process gets a cgroup name of its own. */
  let launches = 0;
  const instances: Instance[] = [];
  /** Ids stay `<kind>-0` .. `<kind>-(n-1)`: instances are removed newest first. */
  const append = (spec: InstanceSpec): Instance => {
    const instance = newInstance(spec, instances.filter((i) => i.kind === spec.kind).length);
    instances.push(instance);
    return instance;
  };
  for (const spec of options.instances) append(spec);

  const launch = (instance: Instance) => {
    const env = instance.port === null ? options.env : { ...options.env, PORT: String(instance.port) };
    instance.startedAt = Date.now();
    const running = startProcess({
      sandbox: options.sandbox,
      run: {
        ...options.run,
        limits: options.limits[instance.kind],
        purpose: 'app',
        command: instance.command,
        publishPort: instance.port,
        name: `${options.name}-${instance.id}-${(launches += 1)}`,
      },
      env,
      output: options.output,
    });
    instance.process = running;
    void running.exited.then((exit) => {
      if (exit.leftover) leftovers.push(`instance ${instance.id}: ${exit.leftover}`);
      if (stopped || instance.process !== running || !instances.includes(instance)) return;
      instance.process = null;
      if (Date.now() - instance.startedAt >= stableAfterMs) instance.crashes = 0;
      instance.crashes += 1;
      instance.restarts += 1;
      const restartInMs = Math.min(backoff.initialMs * 2 ** (instance.crashes - 1), backoff.maxMs);
      options.onExit({ instanceId: instance.id, kind: instance.kind, exit, crashes: instance.crashes, restartInMs });
      instance.restartTimer = setTimeout(() => {
        instance.restartTimer = null;
        if (!stopped && instances.includes(instance)) launch(instance);
      }, restartInMs);
    });
  };

  /**
   * One probe of a web instance's health path. On a network shared with the host, an answer counts only
   * when no other user's process listens on its port (probeShared, src/dataplane/app-health-check.ts).
   */
  const probeInstance = async (instance: Instance): Promise<Probe> => {
    const found = await probe(instance.port!, options.healthCheckPath);
    if (!found.ok || options.sandbox.networkIsolated) return found;
    const users = (await instance.process?.users()) ?? [];
    if (users.length > 0) instance.users = users;
    return answeredByItself(found, instance.port!, instance.users);
  };

  return {
    leftovers,
    stats: () =>
      Promise.all(
        instances.map(async (instance) => ({
          instanceId: instance.id,
          kind: instance.kind,
          restarts: instance.restarts,
          usage: (await instance.process?.usage()) ?? { cpuSeconds: null, memoryBytes: null },
        })),
      ),
    get webTargets() {
      return instances
        .filter((i) => i.kind === 'web' && i.port !== null && !i.pending)
        .map((i) => ({
          instanceId: i.id,
          port: i.port!,
          ...(options.revisionId === undefined ? {} : { revisionId: options.revisionId }),
        }));
    },

    instanceIds: (kind) => instances.filter((i) => i.kind === kind).map((i) => i.id),

    async start() {
      for (const instance of instances) {
        if (instance.kind === 'web') instance.port = await freeAppPort();
        launch(instance);
      }
    },

    async add(spec, count) {
      if (stopped) throw new Error('the supervisor is stopped');
      const added = Array.from({ length: count }, () => append(spec));
      for (const instance of added) {
        if (instance.kind === 'web') instance.port = await freeAppPort();
        // Stopped meanwhile (the revision was replaced or deleted): start nothing nobody would stop.
        if (stopped) throw new Error('the supervisor was stopped while instances were added');
        launch(instance);
      }
      return added.map((i) => i.id);
    },

    async remove(instanceIds, graceMs) {
      const leaving = instances.filter((i) => instanceIds.includes(i.id));
      for (const instance of leaving) instances.splice(instances.indexOf(instance), 1);
      await Promise.all(leaving.map((instance) => stopInstance(instance, graceMs)));
    },

    async waitHealthy(timeoutMs, signal, only) {
      const started = Date.now();
      const deadline = started + timeoutMs;
      const pending = new Set(instances.filter((i) => i.kind === 'web' && (!only || only.includes(i.id))));
      // What each instance's group had used when the wait began: a miss says whether it got no CPU.
      const usageAtStart = new Map(
        await Promise.all([...pending].map(async (i) => [i, (await i.process?.usage()) ?? null] as const)),
      );
      const lastProbe = new Map<Instance, Probe>();
      while (pending.size > 0) {
        if (signal.aborted) throw new HealthCheckError('The deploy was interrupted.');
        if (stopped) throw new HealthCheckError('The app was stopped.');
        for (const instance of [...pending]) {
          if (instance.crashes > 0 || !instances.includes(instance)) {
            // Most likely because another user's process held its port, when a probe saw one.
            const last = lastProbe.get(instance);
            const held = last && 'heldBy' in last ? portHeldMessage(instance.port!, last.heldBy) : '';
            throw new HealthCheckError(
              `The app exited before its health check passed (instance ${instance.id}).${held}`,
            );
          }
          const found = await probeInstance(instance);
          lastProbe.set(instance, found);
          if (found.ok) {
            instance.pending = false;
            pending.delete(instance);
          }
        }
        if (pending.size === 0) return;
        if (Date.now() >= deadline) {
          const late = [...pending];
          const elapsed = (Date.now() - started) / 1000;
          throw await healthCheckMissed(late, {
            path: options.healthCheckPath,
            timeoutMs,
            elapsed,
            usageAtStart,
            lastProbe,
            forwards: options.run.forwards ?? [],
          });
        }
        // Quick probes at first (most apps are up within a second), then gentler ones.
        await sleep(Date.now() - started < 2_000 ? 50 : 250);
      }
    },

    async healthy() {
      const web = instances.filter((i) => i.kind === 'web');
      const answers = await Promise.all(
        web.map(async (i) => i.process !== null && i.port !== null && (await probeInstance(i)).ok),
      );
      return answers.every(Boolean) && instances.every((i) => i.process !== null);
    },

    async stop(graceMs) {
      stopped = true;
      await Promise.all(instances.map((instance) => stopInstance(instance, graceMs)));
    },
  };
}
