/**
 * Supervises the processes of one running revision: `web` instances (each on its own port, health-
 * checked, routed to by the proxy) and optional background `worker` instances. A process that exits
 * while it should run is restarted with exponential back-off; every exit is reported through
 * `onExit`, so the caller can record it as an event and recognise a crash loop. Instances can be
 * added and removed while the revision runs (a changed resource spec is applied in place).
 */
import { freePort } from '../db/embedded-postgres.ts';
import { cpuStarvation } from './cgroup-cpu-starvation.ts';
import { startProcess, type Exit, type OutputSink, type RunningProcess } from './process-runner.ts';
import type { Sandbox, SandboxRun } from './sandbox.ts';
import type { Usage } from './resource-limits.ts';

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

export class HealthCheckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HealthCheckError';
  }
}

/** What one probe of the health path found: a 2xx, another status, nothing listening, or no answer. */
type Probe = { ok: true } | { ok: false; status: number } | { ok: false; refused: true } | { ok: false; silent: true };

/** How long one probe waits for an answer. */
const PROBE_TIMEOUT_MS = 2_000;

async function probe(port: number, path: string): Promise<Probe> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      redirect: 'manual',
    });
    await response.body?.cancel();
    return response.status >= 200 && response.status < 300 ? { ok: true } : { ok: false, status: response.status };
  } catch (error) {
    const code = (error as { cause?: { code?: string } }).cause?.code;
    // Refused or reset before an answer: nothing listens on the port (or it closed the connection at once).
    if (code === 'ECONNREFUSED' || code === 'ECONNRESET') return { ok: false, refused: true };
    return { ok: false, silent: true };
  }
}

const answers2xx = async (port: number, path: string) => (await probe(port, path)).ok;

/**
 * The mistake a health check that ran out of time points at: from the last probe of the instance, and
 * the ports its network namespace listened on (null when it has none of its own: the host's loopback
 * is every process's, so it tells nothing).
 */
function describeMiss(last: Probe | null, port: number, path: string, listening: number[] | null): string {
  const nothingOnPort =
    (listening !== null && !listening.includes(port)) || (last !== null && !last.ok && 'refused' in last);
  if (nothingOnPort) {
    const opened = (listening ?? []).filter((p) => p !== port);
    return (
      ` Nothing was listening on port ${port}: the app must listen on the port in its PORT variable ` +
      `(${port} for this instance), on all addresses (its HOST variable)` +
      (opened.length > 0 ? `; it listens on ${opened.join(', ')} instead.` : '.')
    );
  }
  if (last === null || last.ok) return '';
  if ('status' in last) return ` It answered ${last.status} on ${path}: the health path must answer 2xx.`;
  return ` It accepted connections on port ${port} but did not answer ${path} within ${PROBE_TIMEOUT_MS / 1000} s.`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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
    const instance: Instance = {
      id: `${spec.kind}-${instances.filter((i) => i.kind === spec.kind).length}`,
      pending: spec.kind === 'web',
      kind: spec.kind,
      command: spec.command,
      port: null,
      process: null,
      crashes: 0,
      restarts: 0,
      startedAt: 0,
      restartTimer: null,
    };
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
        if (instance.kind === 'web') instance.port = await freePort();
        launch(instance);
      }
    },

    async add(spec, count) {
      if (stopped) throw new Error('the supervisor is stopped');
      const added = Array.from({ length: count }, () => append(spec));
      for (const instance of added) {
        if (instance.kind === 'web') instance.port = await freePort();
        // Stopped meanwhile (the revision was replaced or deleted): start nothing nobody would stop.
        if (stopped) throw new Error('the supervisor was stopped while instances were added');
        launch(instance);
      }
      return added.map((i) => i.id);
    },

    async remove(instanceIds, graceMs) {
      const leaving = instances.filter((i) => instanceIds.includes(i.id));
      for (const instance of leaving) instances.splice(instances.indexOf(instance), 1);
      await Promise.all(
        leaving.map(async (instance) => {
          if (instance.restartTimer) clearTimeout(instance.restartTimer);
          instance.restartTimer = null;
          await instance.process?.stop(graceMs);
          instance.process = null;
        }),
      );
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
            throw new HealthCheckError(`The app exited before its health check passed (instance ${instance.id}).`);
          }
          const found = await probe(instance.port!, options.healthCheckPath);
          lastProbe.set(instance, found);
          if (found.ok) {
            instance.pending = false;
            pending.delete(instance);
          }
        }
        if (pending.size === 0) return;
        if (Date.now() >= deadline) {
          const late = [...pending];
          const instance = late[0]!;
          const elapsed = (Date.now() - started) / 1000;
          // Short of CPU is said when any instance that missed the deadline was.
          const starvedEach = await Promise.all(
            late.map(async (i) => cpuStarvation(usageAtStart.get(i), (await i.process?.usage()) ?? null, elapsed)),
          );
          const starvedAt = starvedEach.findIndex((why) => why !== null);
          const starved =
            starvedAt < 0
              ? null
              : late.length > 1
                ? `Instance ${late[starvedAt]!.id}: ${starvedEach[starvedAt]}`
                : starvedEach[0];
          const miss = describeMiss(
            lastProbe.get(instance) ?? null,
            instance.port!,
            options.healthCheckPath,
            // The forwards to its database and the API listen there too: not the app's.
            ((await instance.process?.listeningPorts()) ?? null)?.filter(
              (p) => !(options.run.forwards ?? []).some((f) => f.port === p),
            ) ?? null,
          );
          const which =
            late.length > 1
              ? ` on ${late.length} of its instances (${late.map((i) => i.id).join(', ')}).` +
                (miss ? ` Instance ${instance.id}:${miss}` : '')
              : ` (instance ${instance.id}).${miss}`;
          throw new HealthCheckError(
            `The app did not answer 2xx on ${options.healthCheckPath} within ${Math.round(timeoutMs / 1000)} s` +
              which +
              (starved ? ` ${starved}` : ''),
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
