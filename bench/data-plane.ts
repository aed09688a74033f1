/**
 * The data plane part of `npm run bench` (method and results: docs/performance.md, "The local data
 * plane"): what the platform and its isolation cost. Two services run side by side in the bench's
 * process, each with its own database and data directory, alike but for `SLIPWAY_SANDBOX`: `none` (apps
 * run bare: no namespaces, no forwards; cgroup limits still apply as root) and `auto`, the default (full
 * isolation when bubblewrap, slirp4netns and socat are installed: each process tree in its own
 * namespaces, network through slirp4netns, a cgroup). Every measurement takes both modes in turn,
 * interleaved, so that the ratio isolated / bare holds on a noisy machine where absolute times do not.
 *
 * 1. Create to DEPLOYED. For each app (a tiny app with a stand-in install step and no database, and
 *    examples/agent-app with its own database), one warm-up deployment per mode and then N measured
 *    ones per mode, one at a time, the modes alternating (bare first in even rounds, isolated first in
 *    odd ones): `POST /v2/deployments` to the revision's DEPLOYED event, split into phases by the
 *    revision's events (created_at of each status change) and the deploy log's system lines (their
 *    time). After each round, the same app is installed and started directly (no sandbox, no platform:
 *    `sh -c <command>` in a copy of its source, polled every 10 ms until its health path answers 2xx),
 *    so platform overhead = POST to DEPLOYED - (direct install + direct start), per mode.
 * 2. The tiny app's install and start commands under each mode's sandbox without the platform
 *    (bench/data-plane-sandbox.ts: src/dataplane's sandbox and process runner, probed every 10 ms), and
 *    directly, in rotating order: the per-start cost of namespaces, slirp4netns and cgroups, which the
 *    deploy's start phase only shows rounded up to its health probe (every 50 ms in the first 2 s).
 * 3. Proxy overhead. The last deployment of each app in each mode keeps running; each instance is loaded
 *    by autocannon (the bench's load generator child process) directly on the port the router sends to
 *    (found with the router's targets(slug): the app's own socket when bare; when isolated the app's
 *    socket is in its namespace, and this port is slirp4netns's forward on the host's 127.0.0.1), through
 *    a bare node:http proxy (the floor of any proxy in Node), and through the stable URL by Host header
 *    (`<slug>.localhost:<port>`) and by path (`/apps/<slug>/`), with the same connections; in R rounds
 *    (each --duration / R seconds), the two modes back to back for each form: req/s and p99 per mode,
 *    of direct, and isolated / bare.
 *
 * Everything is on loopback and bounded: deployments in count and time (health timeout 30 s, a wait of
 * at most 60 s each), load runs in duration, requests and the load generator's timeout.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../src/db/embedded-postgres.ts';
import { loadAppConfig, type AppConfig } from '../src/dataplane/app-config-file.ts';
import { appDatabaseUrl, createAppDatabase, dropAppDatabase } from '../src/dataplane/app-database.ts';
import { startAppEdge, type AppEdge } from '../src/dataplane/app-edge.ts';
import { buildEnvironment } from '../src/dataplane/app-environment.ts';
import { SERVICE_RESERVE_FACTOR } from '../src/dataplane/service-cpu-reserve.ts';
import { keepCpusBusy } from '../test/support/busy-host.ts';
import type { BenchOptions } from './bench-options.ts';
import { cpuBetween, sampleCpu, type CpuSample } from './cpu-usage.ts';
import {
  answers2xx,
  openBenchSandbox,
  SandboxedCommandError,
  type BenchSandbox,
  type SandboxMode,
} from './data-plane-sandbox.ts';
import { requestByHost, startDataPlaneService, type DataPlaneService } from './data-plane-service.ts';
import { findPlainProxy, startPlainProxy, type PlainProxyKind } from './plain-proxies.ts';
import { benchServiceReserve, type BenchReserve } from './service-reserve.ts';
import type { HttpJob, LoadJob, LoadResult } from './load-protocol.ts';

const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
const EXAMPLE_AGENT_APP = path.resolve(BENCH_DIR, '../examples/agent-app');
const FINAL = ['CREATE_FAILED', 'BUILD_FAILED', 'DEPLOY_FAILED', 'DEPLOYED', 'SKIPPED', 'INTERRUPTED', 'UNKNOWN'];
/** Longest wait for one deployment to serve (the service's health timeout is 30 s). */
const DEPLOY_WAIT_MS = 60_000;
/** Longest wait for a deleted deployment to be gone. */
const DELETE_WAIT_MS = 30_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What runs the load: bench/run.ts's load generator child process. */
export interface LoadRunner {
  run(job: LoadJob): Promise<LoadResult>;
  readonly pid: number | undefined;
}

export interface DataPlaneParts {
  deploy: boolean;
  proxy: boolean;
  /** The API's latency alone and under app load (part of `dataplane-proxy`, or alone as `dataplane-api`). */
  api: boolean;
}

/**
 * `--only` keys of this group: `dataplane` (all of it), `dataplane-deploy`, `dataplane-proxy` (the
 * proxies and the API under app load), `dataplane-api` (only the API under app load, with the tiny app:
 * long rounds of it take minutes, not the proxies' hour).
 */
export function dataPlaneParts(only: string[]): DataPlaneParts {
  if (only.length === 0) return { deploy: true, proxy: true, api: true };
  const all = only.includes('dataplane');
  const proxy = all || only.includes('dataplane-proxy');
  return { deploy: all || only.includes('dataplane-deploy'), proxy, api: proxy || only.includes('dataplane-api') };
}

export const isDataPlaneKey = (key: string) => key === 'dataplane' || key.startsWith('dataplane-');

// ----- the apps ------------------------------------------------------------------------------------

/**
 * The tiny app: plain node:http, no database, and an install step that stands in for a dependency
 * install (a real `npm ci` would need the registry; the bench stays on loopback): a Node process that
 * writes a file. So its install measures what the platform adds around any install command.
 */
export const TINY_APP: Record<string, string> = {
  'package.json': `${JSON.stringify({ name: 'bench-tiny-app', version: '1.0.0', private: true, type: 'module' }, null, 2)}\n`,
  'slipway.json': `${JSON.stringify({ install: 'node install.js', start: 'node server.js', health_check_path: '/healthz', database: false }, null, 2)}\n`,
  'install.js': `import fs from 'node:fs';\nfs.writeFileSync('installed.json', JSON.stringify({ installed_at: new Date().toISOString() }));\n`,
  'server.js': `import http from 'node:http';
const body = JSON.stringify({ greeting: process.env.GREETING || 'hello', revision_id: process.env.SLIPWAY_REVISION_ID ?? null, deployment_id: process.env.SLIPWAY_DEPLOYMENT_ID ?? null });
const server = http.createServer((req, res) => {
  const url = req.url ?? '/';
  if (url === '/healthz') {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': 15 });
    return res.end('{"status":"ok"}');
  }
  if (url === '/' || url.startsWith('/?')) {
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
    return res.end(body);
  }
  res.writeHead(404, { 'content-length': 0 });
  res.end();
});
server.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? '127.0.0.1');
process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeIdleConnections();
});
`,
};

interface BenchApp {
  key: string;
  title: string;
  /** Folder with the source. */
  dir: string;
  secrets: { name: string; value: string }[];
  /** Measured directly too when the app config's start command is something else (`npm start`). */
  nodeCommand: string;
  /** What the proxy runs request (a small JSON answer in both apps). */
  proxyPath: string;
}

// ----- results -------------------------------------------------------------------------------------

/** Phases of one deployment, in ms, in the order they happen. */
export const PHASES = [
  { key: 'accept', title: 'accept: POST to revision QUEUED', owner: 'platform' },
  { key: 'pickup', title: 'queue pick-up: QUEUED to AWAITING_BUILD', owner: 'platform' },
  { key: 'fetch', title: 'fetch and extract: AWAITING_BUILD to BUILDING', owner: 'platform' },
  { key: 'install', title: 'install and build, sandboxed: BUILDING to AWAITING_DEPLOY', owner: 'app + sandbox' },
  { key: 'handoff', title: 'hand-off: AWAITING_DEPLOY to DEPLOYING', owner: 'platform' },
  { key: 'provision', title: 'database and credential: DEPLOYING to "Starting"', owner: 'platform' },
  {
    key: 'start',
    title: 'start until healthy, sandboxed: "Starting" to "Health check passed"',
    owner: 'app + sandbox + poll',
  },
  { key: 'switch', title: 'switch: "Health check passed" to DEPLOYED', owner: 'platform' },
] as const;
export type PhaseKey = (typeof PHASES)[number]['key'];

export interface DeployRun {
  phases: Record<PhaseKey, number>;
  /** POST sent to the DEPLOYED event. */
  total: number;
  /** POST sent to the first 2xx on the health path through the stable URL (polled every 20 ms). */
  firstServed: number;
  /** Share of the machine other processes used meanwhile (null without /proc). */
  otherShare: number | null;
}

export interface DirectRun {
  /** The install and build commands, run to their end; null when the app has none. */
  install: number | null;
  /** The app's database made with the platform's own statements; null when it has none. */
  database: number | null;
  /** The app config's start command until the health path answers 2xx. */
  start: number;
  /** `node server.js` until 2xx, when the start command is something else; else null. */
  node: number | null;
}

/** The two sandbox modes measured side by side: the baseline first. */
export const MODE_KEYS = ['bare', 'isolated'] as const;
export type ModeKey = (typeof MODE_KEYS)[number];
const MODE_SANDBOX: Record<ModeKey, SandboxMode> = { bare: 'none', isolated: 'auto' };

export interface ModeInfo {
  key: ModeKey;
  /** `SLIPWAY_SANDBOX` of its service. */
  sandbox: SandboxMode;
  /** Which proxy serves its service's stable URLs (`SLIPWAY_EDGE_PROXY=auto`: nginx when installed). */
  edge: AppEdge['kind'];
  /** What its service's start log says of its isolation. */
  isolation: string;
  /** bubblewrap, a network namespace of its own and cgroup limits, all in force. */
  contained: boolean;
}

export interface AppDeployResult {
  key: string;
  title: string;
  installCommand: string | null;
  startCommand: string;
  nodeCommand: string;
  database: boolean;
  runs: Record<ModeKey, DeployRun[]>;
  /**
   * Isolated, as many as `runs.isolated`, each while one ordinary process per CPU spins outside
   * Slipway (BUSY_HOST): a host whose every CPU other work keeps busy. Against `runs.isolated` (the
   * same mode on the machine as it is), the share the apps' weight guarantees them.
   */
  busy: DeployRun[];
  /** How many processes kept the CPUs busy during `busy`. */
  busyProcesses: number;
  /** One per round of deployments (one of each mode): the baseline both modes share. */
  direct: DirectRun[];
}

/** How a command was run in the sandbox comparison: by hand (`sh -c`, no cgroup), or under a mode's sandbox. */
export type CommandWay = 'direct' | ModeKey;

/** The tiny app's commands, each way, without the platform (ms). */
export interface SandboxStartResult {
  installCommand: string;
  startCommand: string;
  /** The install command to its end. */
  install: Record<CommandWay, number[]>;
  /** The start command to the first 2xx on its health path, probed every 10 ms. */
  start: Record<CommandWay, number[]>;
}

export interface ProxyCpu {
  /** Share of the machine other processes used meanwhile. */
  otherShare: number;
  /**
   * CPU ms per request in the bench process: both services' APIs, the built-in edges, the host side of
   * the apps' forwards, the apps' log writer.
   */
  serviceMs: number;
  /**
   * In the reverse proxy processes (nginx, HAProxy): the service's edge or the plain nginx, whichever
   * the run went through (about 0 for the others).
   */
  proxyMs: number;
  /**
   * In the app processes (everything below the bench that is not PostgreSQL, a load generator, a
   * reverse proxy or slirp4netns: bubblewrap, sh, npm, node).
   */
  appMs: number;
  /** In slirp4netns, the isolated apps' user-mode network (0 when bare). */
  slirpMs: number;
  postgresMs: number | null;
  loadgenMs: number | null;
}

/**
 * How a proxy run reaches the instance: `direct` on the port the edge sends to; `stable` the stable
 * URL through the service's own edge (`SLIPWAY_EDGE_PROXY=auto`); `nginx` through a plain hand-written
 * nginx (bench/plain-proxies.ts), the yardstick; `haproxy` through a plain HAProxy with the instance in
 * its configuration file; `builtin` through a second edge of the service's code with the built-in Node
 * proxy (the fallback when no proxy is installed), routed to the same instance.
 */
export type ProxyForm = 'direct' | 'stable' | PlainProxyKind | 'builtin';
export const PROXY_FORMS: readonly ProxyForm[] = ['direct', 'stable', 'nginx', 'haproxy', 'builtin'];
const PLAIN_PROXIES: readonly PlainProxyKind[] = ['nginx', 'haproxy'];

export interface ProxyRun {
  app: string;
  appTitle: string;
  mode: ModeKey;
  form: ProxyForm;
  /** 0-based round. */
  round: number;
  result: LoadResult;
  cpu: ProxyCpu | null;
}

/** What loads the app while the API's latency is measured: nothing, or the app through one edge. */
/**
 * What the app does while the API is probed: nothing, loaded through the stable URL or the built-in edge
 * (the service in its CPU reserve, as in production), or through the stable URL with the service out of
 * its reserve (what the API got before it had one), or through the stable URL with the probe itself at
 * ordinary priority (what a client on the same loaded host sees: its own waits for a CPU included).
 */
export type ApiLoad =
  'none' | 'stable' | 'builtin' | 'stable-no-reserve' | 'stable-reserve-light' | 'stable-probe-ordinary';

/**
 * The `stable-reserve-light` condition's reserve: as much as all apps together weigh, what the service
 * gave itself before 2026-12-06, against the SERVICE_RESERVE_FACTOR times that it gives itself now.
 */
export const LIGHT_RESERVE_FACTOR = 1 / SERVICE_RESERVE_FACTOR;

/** One run of the API probe: a fixed rate of a cheap authenticated call, with or without app load. */
export interface ApiRun {
  load: ApiLoad;
  /** 0-based round. */
  round: number;
  /** The API probe's result. */
  result: LoadResult;
  /** The app load that ran meanwhile (null when none). */
  app: LoadResult | null;
  /** Share of the machine other processes used meanwhile (null without /proc). */
  otherShare: number | null;
}

export interface ApiProbeInfo {
  /** The call, e.g. GET /v2/deployments?limit=1 with the service's key. */
  request: string;
  /** Requests per second, over `connections` connections. */
  rate: number;
  connections: number;
  /** The app load starts this long before the probe's warm-up and ends this long after its measurement. */
  leadSeconds: number;
  /** The app loaded meanwhile, and the mode of its service (whose API is probed). */
  appTitle: string;
  mode: ModeKey;
  /** The service's CPU reserve during the runs (bench/service-reserve.ts), or why there was none. */
  reserve?: string;
  /**
   * The probe's nice value (PROBE_NICE) in every run but `stable-probe-ordinary`'s, or why it runs at
   * ordinary priority throughout.
   */
  probePriority?: number | string;
}

export interface DataPlaneResults {
  modes: ModeInfo[];
  /** Deployments and commands that failed and were tried again. */
  failures: FailedAttempt[];
  deployments: number;
  apps: AppDeployResult[];
  sandboxStarts: SandboxStartResult | null;
  proxy: ProxyRun[];
  /** The plain nginx binary, or null when nginx is not installed (no `nginx` runs then). */
  /** The plain proxies' binaries, null when not installed (no such runs then). */
  plainProxies: Record<PlainProxyKind, string | null>;
  api: ApiRun[];
  apiProbe: ApiProbeInfo | null;
  rounds: number;
  connections: number;
  warmupSeconds: number;
  /** Measured seconds of each proxy run (--duration / rounds). */
  durationSeconds: number;
  elapsedSeconds: number;
}

// ----- helpers -------------------------------------------------------------------------------------

/** Clock ticks per second of /proc's CPU times, as bench/cpu-usage.ts reads them. */
const TICKS_PER_SECOND = (() => {
  try {
    const value = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(value) && value > 0 ? value : 100;
  } catch {
    return 100;
  }
})();

function proxyCpu(before: CpuSample | null, after: CpuSample | null, requests: number): ProxyCpu | null {
  const base = cpuBetween(before, after, requests);
  if (base === null || before === null || after === null) return null;
  const delta = (a: number | null, b: number | null) => (a === null || b === null ? 0 : b - a);
  const slirpTicks = after.slirp - before.slirp;
  const proxyTicks = after.proxies - before.proxies;
  const appTicks =
    after.ours -
    before.ours -
    (after.self - before.self) -
    delta(before.postgres, after.postgres) -
    delta(before.loadgen, after.loadgen) -
    slirpTicks -
    proxyTicks;
  const perRequest = (ticks: number) => Math.max(0, (ticks * 1000) / TICKS_PER_SECOND / requests);
  return {
    otherShare: base.otherShare,
    serviceMs: base.nodeMs,
    proxyMs: perRequest(proxyTicks),
    appMs: perRequest(appTicks),
    slirpMs: perRequest(slirpTicks),
    postgresMs: base.postgresMs,
    loadgenMs: base.loadgenMs,
  };
}

interface Spawned {
  exited: Promise<void>;
  hasExited(): boolean;
  output(): string;
  stop(): Promise<void>;
}

/** Direct runs still going: their own process groups do not get a Ctrl-C, so the cleanup stops them. */
const liveCommands = new Set<Spawned>();

/** `sh -c command` in its own process group, as the platform runs it, but without a sandbox. */
function spawnCommand(command: string, cwd: string, env: Record<string, string>): Spawned {
  const child = spawn('/bin/sh', ['-c', command], { cwd, env, detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2_000)));
  let done = false;
  const exited = new Promise<void>((resolve) => {
    child.once('error', (error) => {
      stderr += error.message;
      done = true;
      resolve();
    });
    child.once('close', () => {
      done = true;
      resolve();
    });
  });
  const signal = (name: NodeJS.Signals) => {
    if (done || child.pid === undefined) return;
    try {
      process.kill(-child.pid, name);
    } catch {
      // already gone
    }
  };
  const spawned: Spawned = {
    exited,
    hasExited: () => done,
    output: () => stderr.trim(),
    async stop() {
      signal('SIGTERM');
      const timer = setTimeout(() => signal('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
  liveCommands.add(spawned);
  void exited.then(() => liveCommands.delete(spawned));
  return spawned;
}

/** Milliseconds a command takes to run to its end (it must exit 0). */
async function timeCommand(command: string, cwd: string, env: Record<string, string>): Promise<number> {
  const started = performance.now();
  const child = spawnCommand(command, cwd, env);
  const timer = setTimeout(() => void child.stop(), 60_000);
  await child.exited;
  clearTimeout(timer);
  return performance.now() - started;
}

/** Milliseconds from spawning `command` to the first 2xx on its health path (probed every 10 ms); then stops it. */
async function timeToHealthy(
  command: string,
  cwd: string,
  env: Record<string, string>,
  port: number,
  healthPath: string,
): Promise<number> {
  const started = performance.now();
  const child = spawnCommand(command, cwd, env);
  try {
    for (;;) {
      if (child.hasExited())
        throw new Error(`\`${command}\` exited before its health path answered 2xx: ${child.output()}`);
      if (await answers2xx(port, healthPath)) return performance.now() - started;
      if (performance.now() - started > 30_000)
        throw new Error(`\`${command}\` did not answer 2xx on ${healthPath} within 30 s: ${child.output()}`);
      await sleep(10);
    }
  } finally {
    await child.stop();
  }
}

// ----- create to DEPLOYED --------------------------------------------------------------------------

interface Deployed {
  id: string;
  slug: string;
  run: DeployRun;
}

interface EventRow {
  subject_id: string;
  type: string;
  to_status: string | null;
  created_at: string;
}

interface LogLine {
  time: string;
  stream: string;
  message: string;
}

/** A deployment that ended in a failed status: the platform's failure, which the bench reports. */
class DeployFailure extends Error {
  constructor(
    readonly deploymentId: string,
    readonly status: string,
    readonly reason: string,
  ) {
    super(reason);
    this.name = 'DeployFailure';
  }
}

async function deployOnce(svc: DataPlaneService, app: BenchApp, appConfig: AppConfig): Promise<Deployed> {
  const name = `bench-${app.key}-${randomBytes(3).toString('hex')}`;
  const tarball = await svc.upload(app.dir);
  const t0 = Date.now();
  const created = await svc.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_config: {},
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: app.secrets,
  });
  if (created.status !== 201) throw new Error(`create ${name}: ${created.status} ${JSON.stringify(created.body)}`);
  const id: string = created.body.id;
  const revisionId: string = created.body.latest_revision_id;
  const { app_slug: slug } = await svc.db
    .selectFrom('deployments')
    .select('app_slug')
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  const host = `${slug}.${svc.config.appsDomain}:${svc.edge.port}`;

  // The first 2xx through the stable URL; the revision's status now and then, to stop at a failure.
  let firstServed: number | null = null;
  for (let probe = 1; firstServed === null; probe++) {
    const status = await requestByHost(svc.edge.port, host, appConfig.healthCheckPath).catch(() => 0);
    if (status >= 200 && status < 300) firstServed = Date.now() - t0;
    else if (probe % 10 === 0) {
      const revision = await svc.api('GET', `/v2/deployments/${id}/revisions/${revisionId}`);
      if (FINAL.includes(revision.body?.status) && revision.body.status !== 'DEPLOYED')
        throw new DeployFailure(
          id,
          String(revision.body.status),
          `${name} did not deploy: ${revision.body.status} ${revision.body.failure_reason ?? ''}: ${revision.body.failure_message ?? JSON.stringify(revision.body)}`,
        );
    }
    if (firstServed === null) {
      if (Date.now() - t0 > DEPLOY_WAIT_MS) throw new Error(`${name} was not served within ${DEPLOY_WAIT_MS / 1000} s`);
      await sleep(20);
    }
  }

  // The edge may serve the new instance a moment before the DEPLOYED event commits: wait for it.
  let events: EventRow[] = [];
  for (const until = Date.now() + 15_000; ; await sleep(50)) {
    events = (
      (await svc.api<{ resources: EventRow[] }>('GET', `/v2/deployments/${id}/events?limit=100`)).body.resources ?? []
    ).filter((e) => e.subject_id === revisionId && e.type === 'revision.status_changed');
    if (events.some((e) => e.to_status === 'DEPLOYED') || Date.now() > until) break;
  }
  const reached = (status: string) => {
    const event = events.find((e) => e.to_status === status);
    if (!event)
      throw new Error(
        `${name}: no event of revision ${revisionId} reaching ${status} (${events.map((e) => e.to_status).join(', ')})`,
      );
    return Date.parse(event.created_at);
  };
  // The system lines are written before DEPLOYED, but stored in batches (every 200 ms): wait for them.
  let starting: number | undefined;
  let healthy: number | undefined;
  let system: LogLine[] = [];
  for (const until = Date.now() + 15_000; (starting === undefined || healthy === undefined) && Date.now() < until;) {
    const page = await svc.api<{ lines: LogLine[] }>(
      'GET',
      `/v2/deployments/${id}/revisions/${revisionId}/logs?type=deploy&limit=1000`,
    );
    system = (page.body?.lines ?? []).filter((l) => l.stream === 'system');
    const s = system.find((l) => l.message.startsWith('Starting '));
    const h = system.find((l) => l.message.startsWith('Health check passed'));
    starting = s ? Date.parse(s.time) : undefined;
    healthy = h ? Date.parse(h.time) : undefined;
    if (starting === undefined || healthy === undefined) await sleep(100);
  }
  if (starting === undefined || healthy === undefined)
    throw new Error(
      `${name}: the deploy log has no "Starting" or "Health check passed" line: ${JSON.stringify(system)}`,
    );

  const queued = reached('QUEUED');
  const awaitingBuild = reached('AWAITING_BUILD');
  const building = reached('BUILDING');
  const awaitingDeploy = reached('AWAITING_DEPLOY');
  const deploying = reached('DEPLOYING');
  const deployed = reached('DEPLOYED');
  return {
    id,
    slug,
    run: {
      phases: {
        accept: queued - t0,
        pickup: awaitingBuild - queued,
        fetch: building - awaitingBuild,
        install: awaitingDeploy - building,
        handoff: deploying - awaitingDeploy,
        provision: starting - deploying,
        start: healthy - starting,
        switch: deployed - healthy,
      },
      total: deployed - t0,
      firstServed,
      otherShare: null,
    },
  };
}

/** A deployment (or a sandboxed command) that failed and was tried again. */
export interface FailedAttempt {
  app: string;
  mode: ModeKey;
  what: 'deployment' | 'command';
  message: string;
}

/** Tries again at most this many times after a failure of the platform (it is reported, not hidden). */
const RETRIES = 2;

/**
 * deployOnce, and when the deployment fails (a failed status, not a bench error): the failure noted,
 * the deployment deleted, and another one made, at most RETRIES times.
 */
async function deployNoting(
  svc: DataPlaneService,
  mode: ModeKey,
  app: BenchApp,
  appConfig: AppConfig,
  failures: FailedAttempt[],
  say: (line: string) => void,
): Promise<Deployed> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await deployOnce(svc, app, appConfig);
    } catch (error) {
      if (!(error instanceof DeployFailure) || attempt >= RETRIES) throw error;
      failures.push({ app: app.key, mode, what: 'deployment', message: error.message });
      say(`  FAILED, trying again: ${error.message}`);
      await deleteDeployment(svc, error.deploymentId);
    }
  }
}

/** A sandboxed command's measurement, tried again (and the failure noted) when the command failed. */
async function measureNoting(
  mode: ModeKey,
  app: BenchApp,
  failures: FailedAttempt[],
  say: (line: string) => void,
  measure: () => Promise<number>,
): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await measure();
    } catch (error) {
      if (!(error instanceof SandboxedCommandError) || attempt >= RETRIES) throw error;
      failures.push({ app: app.key, mode, what: 'command', message: error.message });
      say(`  FAILED, trying again: ${error.message}`);
    }
  }
}

async function deleteDeployment(svc: DataPlaneService, id: string): Promise<void> {
  const removed = await svc.api('DELETE', `/v2/deployments/${id}`);
  if (removed.status !== 204 && removed.status !== 404)
    throw new Error(`delete ${id}: ${removed.status} ${JSON.stringify(removed.body)}`);
  for (const until = Date.now() + DELETE_WAIT_MS; Date.now() < until; await sleep(100)) {
    if ((await svc.api('GET', `/v2/deployments/${id}`)).status === 404) return;
  }
  throw new Error(`deployment ${id} was not deleted within ${DELETE_WAIT_MS / 1000} s`);
}

/** The same app installed and started by hand: a fresh copy of its source, no sandbox, no platform. */
async function directOnce(svc: DataPlaneService, app: BenchApp, appConfig: AppConfig): Promise<DirectRun> {
  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-direct-'));
  const src = path.join(work, 'src');
  const home = path.join(work, 'home');
  await fs.cp(app.dir, src, { recursive: true });
  await fs.mkdir(home);
  const env = buildEnvironment(
    { src, home },
    appConfig.env,
    Object.fromEntries(app.secrets.map((s) => [s.name, s.value])),
  );
  const databases: string[] = [];
  /** A fresh database per start, as a first deploy has: made with the platform's statements, timed. */
  const database = async (): Promise<{ ms: number; url: string } | null> => {
    if (!appConfig.database) return null;
    const started = performance.now();
    const made = await createAppDatabase(svc.pool);
    const ms = performance.now() - started;
    databases.push(made.name);
    return { ms, url: appDatabaseUrl(svc.databaseUrl, made) };
  };
  const start = async (command: string, db: { url: string } | null) => {
    const port = await freePort();
    return timeToHealthy(
      command,
      src,
      { ...env, HOST: '127.0.0.1', PORT: String(port), ...(db ? { DATABASE_URL: db.url } : {}) },
      port,
      appConfig.healthCheckPath,
    );
  };
  try {
    let install: number | null = null;
    for (const command of [appConfig.install, appConfig.build]) {
      if (command) install = (install ?? 0) + (await timeCommand(command, src, env));
    }
    const db = await database();
    const startMs = await start(appConfig.start, db);
    const node = app.nodeCommand === appConfig.start ? null : await start(app.nodeCommand, await database());
    return { install, database: db?.ms ?? null, start: startMs, node };
  } finally {
    for (const name of databases) await dropAppDatabase(svc.pool, name).catch(() => undefined);
    await fs.rm(work, { recursive: true, force: true });
  }
}

// ----- proxy overhead ------------------------------------------------------------------------------

/** The API probe: a cheap authenticated call at a fixed, modest rate (its latency is what is measured). */
const API_PROBE_PATH = '/v2/deployments?limit=1';
const API_PROBE_RATE = 200;
const API_PROBE_CONNECTIONS = 4;
/**
 * Seconds the app load runs before the probe starts measuring, and after it stops: both generators get
 * their jobs at once, so the probe's warm-up is the app load's plus this, and its measured seconds lie
 * inside the app load's.
 */
const API_PROBE_LEAD = 0.5;
/**
 * The probe stands for a client on another machine (the CLI, the dashboard, a CI job): its own waits for
 * a CPU on this loaded host are not the API's latency, so it runs raised above the app load, which stays
 * at ordinary priority. One more condition runs it at ordinary priority, as a client on the same host
 * would be, so that what the instrument itself adds is shown rather than hidden.
 */
const PROBE_NICE = -10;

/** Sets the probe's nice value; the reason when it cannot (raising a priority needs root). */
function setProbePriority(pid: number | undefined, nice: number): string | null {
  if (pid === undefined) return 'the probe has no process id';
  try {
    os.setPriority(pid, nice);
    return null;
  } catch (error) {
    return `the probe runs at ordinary priority throughout: ${(error as Error).message}`;
  }
}
/** One instance of an app to load: the service it runs in, and its slug. */
interface ProxyTarget {
  mode: ModeKey;
  svc: DataPlaneService;
  slug: string;
}

/** One way to reach the instance. */
interface Form {
  form: ProxyForm;
  origin: string;
  headers: Record<string, string>;
}

/**
 * The ways to reach the instance the service's edge routes `target.slug` to. The plain nginx and the
 * built-in edge are started here, pointed at the same instance; their closers are pushed to `closers`.
 */
async function formsOf(
  target: ProxyTarget,
  plainProxies: Record<PlainProxyKind, string | null>,
  closers: (() => Promise<void>)[],
): Promise<Form[]> {
  const { svc, slug } = target;
  const instances = svc.edge.targets(slug);
  const instance = instances[0];
  if (!instance) throw new Error(`${slug} has no instance in the edge's table`);
  const hostOf = (port: number) => ({ host: `${slug}.${svc.config.appsDomain}:${port}` });
  const forms: Form[] = [
    { form: 'direct', origin: `http://127.0.0.1:${instance.port}`, headers: {} },
    { form: 'stable', origin: `http://127.0.0.1:${svc.edge.port}`, headers: hostOf(svc.edge.port) },
  ];
  for (const kind of PLAIN_PROXIES) {
    const binary = plainProxies[kind];
    if (binary === null) continue;
    const plain = await startPlainProxy(kind, binary, instance.port);
    closers.push(() => plain.close());
    forms.push({ form: kind, origin: plain.origin, headers: {} });
  }
  if (svc.edge.kind !== 'builtin') {
    // The fallback edge, as the service starts it when nginx is missing (in the service's process), on a
    // port of its own, with the same route.
    const builtin = await startAppEdge({
      config: { ...svc.config, edgeProxy: 'builtin', appsPort: 0, appsPublicUrl: null },
      logger: svc.logger,
    });
    closers.push(() => builtin.close());
    await builtin.setTargets(slug, instances);
    forms.push({ form: 'builtin', origin: `http://127.0.0.1:${builtin.port}`, headers: hostOf(builtin.port) });
  }
  return forms;
}

function appJob(options: BenchOptions, f: Form, path: string, warmupSeconds: number, durationSeconds: number): HttpJob {
  return {
    kind: 'http',
    origin: f.origin,
    method: 'GET',
    path,
    slots: [],
    body: null,
    uniquePrefix: '',
    headers: f.headers,
    expectStatus: 200,
    connections: options.connections,
    warmupSeconds,
    durationSeconds,
    maxRequests: options.maxRequests,
  };
}

/** The forms in round `round`: forward in even rounds, backward in odd ones, so no form always goes first. */
function inTurn<T>(items: readonly T[], round: number): T[] {
  return round % 2 === 0 ? [...items] : [...items].reverse();
}

/**
 * The app's instances (one per mode) loaded each way, in `rounds` rounds; within a round the modes in
 * turn, and for each mode its forms back to back (so the stable URL and plain nginx of one instance
 * run next to each other), their order alternating from round to round.
 */
async function proxyRuns(
  load: LoadRunner,
  options: BenchOptions,
  rounds: number,
  app: BenchApp,
  formsByMode: Map<ModeKey, Form[]>,
  say: (line: string) => void,
): Promise<ProxyRun[]> {
  const runs: ProxyRun[] = [];
  const durationSeconds = options.durationSeconds / rounds;
  for (let round = 0; round < rounds; round++) {
    for (const mode of modesInTurn(round)) {
      for (const f of inTurn(formsByMode.get(mode) ?? [], round)) {
        const before = await sampleCpu(load.pid);
        const result = await load.run(appJob(options, f, app.proxyPath, options.warmupSeconds, durationSeconds));
        const cpu = proxyCpu(before, await sampleCpu(load.pid), result.allRequests);
        runs.push({ app: app.key, appTitle: app.title, mode, form: f.form, round, result, cpu });
        say(
          `  proxy ${app.key} ${mode} ${f.form} (round ${round + 1}/${rounds}): ${Math.round(result.rps)}/s p50 ${result.p50.toFixed(2)} p99 ${result.p99.toFixed(2)}` +
            (cpu
              ? `, CPU ms/req service ${cpu.serviceMs.toFixed(3)} proxy ${cpu.proxyMs.toFixed(3)} app ${cpu.appMs.toFixed(3)}${mode === 'isolated' ? ` slirp4netns ${cpu.slirpMs.toFixed(3)}` : ''}, others ${Math.round(cpu.otherShare * 100)}%`
              : '') +
            (result.failures ? ` FAILED ${result.failures}: ${result.firstFailure}` : ''),
        );
      }
    }
  }
  return runs;
}

/**
 * The API's latency alone and while the app is loaded through each edge: the probe (a second load
 * generator, so that it never waits behind the app load's event loop) sends API_PROBE_RATE cheap
 * authenticated calls a second to the app's service; in each round the three conditions in turn.
 */
async function apiRuns(
  load: LoadRunner,
  probe: LoadRunner,
  options: BenchOptions,
  rounds: number,
  app: BenchApp,
  target: ProxyTarget,
  forms: Form[],
  reserve: BenchReserve | null,
  info: ApiProbeInfo,
  say: (line: string) => void,
): Promise<ApiRun[]> {
  const durationSeconds = options.durationSeconds / rounds;
  const probeJob: HttpJob = {
    kind: 'http',
    origin: target.svc.origin,
    method: 'GET',
    path: API_PROBE_PATH,
    slots: [],
    body: null,
    uniquePrefix: '',
    headers: { 'x-api-key': target.svc.apiKey },
    expectStatus: 200,
    connections: API_PROBE_CONNECTIONS,
    warmupSeconds: options.warmupSeconds + API_PROBE_LEAD,
    durationSeconds,
    maxRequests: options.maxRequests,
    rate: API_PROBE_RATE,
  };
  const loads: ApiLoad[] = ['none', ...(['stable', 'builtin'] as const).filter((l) => forms.some((f) => f.form === l))];
  if (reserve !== null && loads.includes('stable')) loads.push('stable-no-reserve', 'stable-reserve-light');
  const cannotRaise = setProbePriority(probe.pid, PROBE_NICE);
  info.probePriority = cannotRaise ?? PROBE_NICE;
  if (cannotRaise === null && loads.includes('stable')) loads.push('stable-probe-ordinary');
  else if (cannotRaise !== null) say(`  API under app load: ${cannotRaise}`);
  const runs: ApiRun[] = [];
  // The app's load generator is an ordinary process at ordinary priority, as any client or neighbour on
  // a host is: the API's p99 under app load is measured against that, not against a generator that
  // yields to it.
  try {
    await apiRounds();
  } finally {
    await reserve?.outside();
    if (cannotRaise === null) setProbePriority(probe.pid, 0);
  }
  return runs;

  async function apiRounds(): Promise<void> {
    for (let round = 0; round < rounds; round++) {
      for (const condition of inTurn(loads, round)) {
        const edge = condition.startsWith('stable-') ? 'stable' : condition;
        const f = forms.find((x) => x.form === edge);
        await (condition === 'stable-no-reserve' ? reserve?.outside() : reserve?.inside());
        await reserve?.weigh(condition === 'stable-reserve-light' ? LIGHT_RESERVE_FACTOR : 1);
        if (cannotRaise === null) setProbePriority(probe.pid, condition === 'stable-probe-ordinary' ? 0 : PROBE_NICE);
        const before = await sampleCpu(load.pid);
        const [result, appResult] = await Promise.all([
          probe.run(probeJob),
          f === undefined
            ? Promise.resolve(null)
            : load.run(appJob(options, f, app.proxyPath, 0, probeJob.warmupSeconds + durationSeconds + API_PROBE_LEAD)),
        ]);
        const otherShare = cpuBetween(before, await sampleCpu(load.pid), 1)?.otherShare ?? null;
        runs.push({ load: condition, round, result, app: appResult, otherShare });
        say(
          `  API under app load ${condition} (round ${round + 1}/${rounds}): ${Math.round(result.rps)}/s p50 ${result.p50.toFixed(2)} p99 ${result.p99.toFixed(2)}` +
            (appResult ? `; app ${Math.round(appResult.rps)}/s p99 ${appResult.p99.toFixed(2)}` : '') +
            (otherShare === null ? '' : `, others ${Math.round(otherShare * 100)}%`) +
            (result.failures ? ` FAILED ${result.failures}: ${result.firstFailure}` : '') +
            (appResult?.failures ? ` app FAILED ${appResult.failures}: ${appResult.firstFailure}` : ''),
        );
      }
    }
  }
}

// ----- the group -----------------------------------------------------------------------------------

export interface DataPlaneBenchContext {
  options: BenchOptions;
  parts: DataPlaneParts;
  /** Any database on the bench's server; the services' own databases are made beside it. */
  serverUrl: string;
  load: LoadRunner;
  /** A second load generator for the API probe that runs beside the app load (null: no API runs). */
  probe: LoadRunner | null;
  say: (line: string) => void;
  /** Registers a cleanup step for Ctrl-C (the group also cleans up itself when it ends). */
  defer(step: () => Promise<void>): void;
}

const fmt = (ms: number) => `${Math.round(ms)} ms`;

/** Both modes, the first of them alternating with `round`. */
const modesInTurn = (round: number): ModeKey[] => (round % 2 === 0 ? [...MODE_KEYS] : [...MODE_KEYS].reverse());

function deployLine(mode: ModeKey, run: DeployRun): string {
  const p = run.phases;
  return (
    `${mode}: DEPLOYED after ${fmt(run.total)} (served ${fmt(run.firstServed)}): pick-up ${fmt(p.pickup)}, fetch ${fmt(p.fetch)}, install ${fmt(p.install)}, ` +
    `database ${fmt(p.provision)}, start ${fmt(p.start)}, switch ${fmt(p.switch)}` +
    (run.otherShare === null ? '' : `, others ${Math.round(run.otherShare * 100)}%`)
  );
}

function directLine(direct: DirectRun): string {
  return `direct: ${direct.install === null ? '' : `install ${fmt(direct.install)}, `}${direct.database === null ? '' : `database ${fmt(direct.database)}, `}start ${fmt(direct.start)}${direct.node === null ? '' : `, node ${fmt(direct.node)}`}`;
}

export async function runDataPlaneBench(ctx: DataPlaneBenchContext): Promise<DataPlaneResults> {
  const { options, parts, say } = ctx;
  const rounds = options.proxyRounds;
  const started = Date.now();
  const tinyDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-tiny-'));
  ctx.defer(() => fs.rm(tinyDir, { recursive: true, force: true }));
  for (const [file, content] of Object.entries(TINY_APP)) await fs.writeFile(path.join(tinyDir, file), content);
  const tiny: BenchApp = {
    key: 'tiny',
    title: 'tiny app',
    dir: tinyDir,
    secrets: [{ name: 'GREETING', value: 'hello-from-bench' }],
    nodeCommand: 'node server.js',
    proxyPath: '/',
  };
  const apps: BenchApp[] = [
    tiny,
    {
      key: 'agent',
      title: 'examples/agent-app',
      dir: EXAMPLE_AGENT_APP,
      // Its start command is `npm start`, and npm, in the fresh HOME every revision gets, first asks the
      // registry whether a newer npm exists (about 0.5 s, and traffic off this machine). The bench stays
      // on loopback: the check is switched off, for the deployed app and the direct start alike (the
      // platform's base environment now switches it off too).
      secrets: [
        { name: 'GREETING', value: 'hello-from-bench' },
        { name: 'npm_config_update_notifier', value: 'false' },
      ],
      nodeCommand: 'node server.js',
      proxyPath: '/',
    },
  ];

  ctx.defer(async () => {
    await Promise.all([...liveCommands].map((c) => c.stop()));
  });
  const services = {} as Record<ModeKey, DataPlaneService>;
  const sandboxes = {} as Record<ModeKey, BenchSandbox>;
  const closing: (() => Promise<void>)[] = [];
  const count = options.deployments;
  const results: AppDeployResult[] = [];
  const proxy: ProxyRun[] = [];
  const api: ApiRun[] = [];
  let apiProbe: ApiProbeInfo | null = null;
  const plainProxies: Record<PlainProxyKind, string | null> = { nginx: null, haproxy: null };
  if (parts.proxy) for (const kind of PLAIN_PROXIES) plainProxies[kind] = await findPlainProxy(kind);
  if (parts.proxy && plainProxies.nginx === null)
    say('  CAUTION: nginx is not installed: no plain nginx to compare the stable URL with (apt-get install nginx)');
  let sandboxStarts: SandboxStartResult | null = null;
  const failures: FailedAttempt[] = [];
  try {
    for (const mode of MODE_KEYS) {
      const svc = await startDataPlaneService(ctx.serverUrl, options.logLevel, MODE_SANDBOX[mode]);
      ctx.defer(() => svc.close());
      closing.push(() => svc.close());
      services[mode] = svc;
      const sandbox = await openBenchSandbox(MODE_SANDBOX[mode]);
      ctx.defer(() => sandbox.close());
      closing.push(() => sandbox.close());
      sandboxes[mode] = sandbox;
      say(
        `data plane, ${mode} (SLIPWAY_SANDBOX=${MODE_SANDBOX[mode]}): ${svc.isolation}; apps served by ${svc.edge.kind} on port ${svc.edge.port}`,
      );
    }
    const modes: ModeInfo[] = MODE_KEYS.map((key) => ({
      key,
      sandbox: MODE_SANDBOX[key],
      edge: services[key].edge.kind,
      isolation: services[key].isolation,
      contained: sandboxes[key].contained,
    }));
    if (!sandboxes.isolated.contained)
      say('  CAUTION: the default mode does not contain apps fully here; isolated / bare understates the cost');

    for (const app of apps) {
      if (!parts.deploy && !parts.proxy && app !== tiny) continue;
      const appConfig = await loadAppConfig(app.dir, 'slipway.json', {});
      const result: AppDeployResult = {
        key: app.key,
        title: app.title,
        installCommand: [appConfig.install, appConfig.build].filter(Boolean).join(' && ') || null,
        startCommand: appConfig.start,
        nodeCommand: app.nodeCommand,
        database: appConfig.database,
        runs: { bare: [], isolated: [] },
        busy: [],
        busyProcesses: 0,
        direct: [],
      };
      const serving: Partial<Record<ModeKey, Deployed>> = {};
      if (parts.deploy) {
        // One unmeasured round first: the services' code paths, the file cache, npm's own start.
        for (const mode of MODE_KEYS) {
          const warm = await deployNoting(services[mode], mode, app, appConfig, failures, say);
          await deleteDeployment(services[mode], warm.id);
        }
        await directOnce(services.bare, app, appConfig);
        for (let i = 0; i < count; i++) {
          const lines: string[] = [];
          for (const mode of modesInTurn(i)) {
            const svc = services[mode];
            // The mode's previous deployment is gone before the next starts; the other mode's last one
            // stays up, idle, for the proxy runs.
            const previous = serving[mode];
            if (previous) await deleteDeployment(svc, previous.id);
            // How busy the rest of the machine was during the deployment. Not measured for the direct
            // runs: the SIGTERM to their process group orphans npm's and sh's children, which init then
            // reaps, so their CPU time would count as other processes'.
            const before = await sampleCpu(ctx.load.pid);
            const deployed = await deployNoting(svc, mode, app, appConfig, failures, say);
            deployed.run.otherShare = cpuBetween(before, await sampleCpu(ctx.load.pid), 1)?.otherShare ?? null;
            serving[mode] = deployed;
            result.runs[mode].push(deployed.run);
            lines.push(deployLine(mode, deployed.run));
          }
          const direct = await directOnce(services.bare, app, appConfig);
          result.direct.push(direct);
          say(`  deploy ${app.key} ${i + 1}/${count}: ${[...lines, directLine(direct)].join(' | ')}`);
        }
        // The same deployments on a busy host: the default mode, each while every CPU spins outside Slipway.
        for (let i = 0; i < count; i++) {
          const previous = serving.isolated;
          if (previous) await deleteDeployment(services.isolated, previous.id);
          const busy = keepCpusBusy();
          let deployed: Deployed;
          try {
            deployed = await deployNoting(services.isolated, 'isolated', app, appConfig, failures, say);
          } finally {
            await busy.stop();
          }
          serving.isolated = deployed;
          result.busy.push(deployed.run);
          result.busyProcesses = busy.count;
          say(
            `  deploy ${app.key} busy host ${i + 1}/${count} (${busy.count} processes spinning): ${deployLine('isolated', deployed.run)}`,
          );
        }
        results.push(result);

        if (app === tiny && appConfig.install) {
          // The tiny app's own commands each way, no platform: a warm-up round, then one per deployment.
          const ways: CommandWay[] = ['direct', ...MODE_KEYS];
          const starts: SandboxStartResult = {
            installCommand: appConfig.install,
            startCommand: appConfig.start,
            install: { direct: [], bare: [], isolated: [] },
            start: { direct: [], bare: [], isolated: [] },
          };
          for (let i = -1; i < count; i++) {
            const order = ways.map((_, k) => ways[(k + Math.max(0, i)) % ways.length]!);
            const line: string[] = [];
            for (const way of order) {
              let install: number;
              let start: number;
              if (way === 'direct') {
                const direct = await directOnce(services.bare, app, appConfig);
                install = direct.install ?? 0;
                start = direct.start;
              } else {
                const sandbox = sandboxes[way];
                const command = appConfig.install;
                install = await measureNoting(way, app, failures, say, () => sandbox.timeCommand(app.dir, command));
                start = await measureNoting(way, app, failures, say, () =>
                  sandbox.timeStart(app.dir, appConfig.start, appConfig.healthCheckPath, services[way].port),
                );
              }
              if (i >= 0) {
                starts.install[way].push(install);
                starts.start[way].push(start);
              }
              line.push(`${way} install ${fmt(install)}, start ${fmt(start)}`);
            }
            say(`  commands ${app.key} ${i < 0 ? 'warm-up' : `${i + 1}/${count}`}: ${line.join(' | ')}`);
          }
          sandboxStarts = starts;
        }
      }
      if (parts.proxy || (parts.api && app === tiny)) {
        const closers: (() => Promise<void>)[] = [];
        const closeAll = async () => {
          for (const close of closers.splice(0).reverse()) await close();
        };
        ctx.defer(closeAll);
        try {
          const formsByMode = new Map<ModeKey, Form[]>();
          const targets = new Map<ModeKey, ProxyTarget>();
          for (const mode of MODE_KEYS) {
            const svc = services[mode];
            const deployed = (serving[mode] ??= await deployNoting(svc, mode, app, appConfig, failures, say));
            const target = { mode, svc, slug: deployed.slug };
            targets.set(mode, target);
            formsByMode.set(mode, await formsOf(target, plainProxies, closers));
          }
          if (parts.proxy) proxy.push(...(await proxyRuns(ctx.load, options, rounds, app, formsByMode, say)));
          // The API's latency under app load: once, with the tiny app (the proxy's share of each request
          // is largest), in the default mode.
          if (parts.api && app === tiny && ctx.probe !== null) {
            const mode: ModeKey = 'isolated';
            apiProbe = {
              request: `GET ${API_PROBE_PATH}`,
              rate: API_PROBE_RATE,
              connections: API_PROBE_CONNECTIONS,
              leadSeconds: API_PROBE_LEAD,
              appTitle: app.title,
              mode,
            };
            const forms = formsByMode.get(mode)!;
            const reserve = await benchServiceReserve();
            if (typeof reserve === 'string') say(`  API under app load: ${reserve}`);
            const held = typeof reserve === 'string' ? null : reserve;
            apiProbe.reserve = typeof reserve === 'string' ? reserve : reserve.description;
            try {
              api.push(
                ...(await apiRuns(
                  ctx.load,
                  ctx.probe,
                  options,
                  rounds,
                  app,
                  targets.get(mode)!,
                  forms,
                  held,
                  apiProbe,
                  say,
                )),
              );
            } finally {
              await held?.dispose();
            }
          }
        } finally {
          await closeAll();
        }
      }
      for (const mode of MODE_KEYS) {
        const deployed = serving[mode];
        if (deployed) await deleteDeployment(services[mode], deployed.id);
      }
    }
    return {
      modes,
      failures,
      deployments: count,
      apps: results,
      sandboxStarts,
      proxy,
      plainProxies,
      api,
      apiProbe,
      rounds,
      connections: options.connections,
      warmupSeconds: options.warmupSeconds,
      durationSeconds: options.durationSeconds / rounds,
      elapsedSeconds: (Date.now() - started) / 1000,
    };
  } finally {
    for (const close of closing.reverse()) await close();
    await fs.rm(tinyDir, { recursive: true, force: true });
  }
}
