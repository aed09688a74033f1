/**
 * The listener long-poll part of `npm run bench` (`--only listeners`; method and results:
 * docs/performance.md, "Listener long-polls"). How long a listener waits for a change, and what the
 * service pays to hold many listeners' long-polls, each against the same measurement in the same run:
 *
 * 1. Setup: N listeners (default 1,000), each with its credential and one external_container
 *    deployment, made through the API; each simulated listener reads its desired state once (its ETag).
 * 2. One listener long-polling: P times (default 200), a PATCH of its deployment's image through the
 *    API while its `GET .../desired-state?wait=60` (If-None-Match) waits: the time from sending the
 *    PATCH to the end of the long-poll's 200 answer. The PATCH's own time is recorded beside it.
 * 3. All N long-polling at once: the same P patches, each to another listener's deployment.
 *    Meanwhile the other polls must stay asleep (a patch wakes its listener's poll only).
 * 4. The service's memory (RSS and V8 heap, after a full garbage collection) idle (no poll open) and
 *    while it holds the N polls, and its CPU time while holding them with nothing changing (the
 *    safety re-reads every 10 s).
 *
 * The service runs in a child process of its own (bench/listener-polls-service.ts), so that its memory
 * and CPU are its alone; the simulated listeners are protocol clients in the bench's process, sharing
 * one keep-alive agent (one socket per open poll: N sockets on each side, so the file descriptor limit
 * must allow it). Everything is on loopback and bounded: setup requests, each answer (30 s), the run.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createMigratedDatabase } from '../scripts/scratch-server.ts';
import { withClient } from '../src/db/admin-client.ts';
import { cpuBetween, sampleCpu } from './cpu-usage.ts';
import type { MemorySample, ServiceReply, ServiceRequest, ServiceStart } from './listener-polls-service.ts';

const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
/** The longest `wait` the protocol allows: no poll of the measured phases ends by its timeout. */
const WAIT_SECONDS = 60;
/** Longest wait for one answer after a patch; far above any real answer, it only ends a hung run. */
const ANSWER_LIMIT_MS = 30_000;
/** How long the held polls are watched with nothing changing: one full safety re-read period (10 s). */
const HOLD_SECONDS = 10;
/** Setup requests in flight at once. */
const SETUP_CONCURRENCY = 16;
/** Unmeasured patches first, so that no measured one pays for compiling the code paths. */
const WARMUP_PATCHES = 10;

export const isListenersKey = (key: string) => key === 'listeners';

export interface LatencySummary {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

export interface PhaseResult {
  /** Listeners long-polling during the phase. */
  polling: number;
  /** PATCH sent to the end of the listener's 200 answer, ms. */
  answer: LatencySummary;
  /** The PATCH request itself, sent to its response, ms. */
  patch: LatencySummary;
  /** The answer's end after the PATCH's response, ms: the wake-up path alone (negative: the answer came first). */
  afterPatch: LatencySummary;
  /** Answers to polls whose listener nothing changed for (should be none). */
  otherAnswers: number;
  /** Share of the machine other processes used during the phase (null without /proc). */
  otherCpuShare: number | null;
}

export interface HoldCpu {
  /** CPU ms per second of the service process (its own count, over IPC). */
  serviceMs: number;
  /** CPU ms per second of PostgreSQL (the embedded server; null with DATABASE_URL or without /proc). */
  postgresMs: number | null;
  otherCpuShare: number | null;
}

export interface ListenerPollResults {
  listeners: number;
  patches: number;
  single: PhaseResult;
  many: PhaseResult;
  memory: { idle: MemorySample; holding: MemorySample; released: MemorySample };
  /** CPU while holding every poll with nothing changing. */
  holdCpu: HoldCpu;
  /** The same with no poll open. */
  idleCpu: HoldCpu;
  holdSeconds: number;
  setupSeconds: number;
  elapsedSeconds: number;
}

export interface ListenerPollContext {
  listeners: number;
  patches: number;
  logLevel: string;
  /** Any database on the bench's server; the service's own database is made beside it. */
  serverUrl: string;
  readonly say: (line: string) => void;
  /** Registers a cleanup step for Ctrl-C (the group also cleans up itself when it ends). */
  readonly defer: (step: () => Promise<void> | void) => void;
}

// ----- helpers -------------------------------------------------------------------------------------

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1);

interface Timing {
  answer: number;
  patch: number;
  afterPatch: number;
}

function phaseResult(
  polling: number,
  timings: Timing[],
  otherAnswers: number,
  otherCpuShare: number | null,
): PhaseResult {
  return {
    polling,
    answer: summarize(timings.map((t) => t.answer)),
    patch: summarize(timings.map((t) => t.patch)),
    afterPatch: summarize(timings.map((t) => t.afterPatch)),
    otherAnswers,
    otherCpuShare,
  };
}

export function summarize(values: number[]): LatencySummary {
  const sorted = [...values].sort((a, b) => a - b);
  // Nearest rank: the value below which that share of the samples lies.
  const rank = (p: number) =>
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? Number.NaN;
  return { count: sorted.length, p50: rank(0.5), p99: rank(0.99), max: sorted.at(-1) ?? Number.NaN };
}

/** The soft limit of open files of this process (the child inherits it); null where /proc is not. */
async function openFilesLimit(): Promise<number | null> {
  const limits = await fs.readFile('/proc/self/limits', 'utf8').catch(() => null);
  const match = limits === null ? null : /^Max open files\s+(\d+|unlimited)/m.exec(limits);
  if (!match) return null;
  return match[1] === 'unlimited' ? Number.POSITIVE_INFINITY : Number(match[1]);
}

/** CPU milliseconds per second of the service and of PostgreSQL over the next `seconds`. */
async function cpuOver(service: ServiceProcess, seconds: number): Promise<HoldCpu> {
  const machine = await sampleCpu(service.pid);
  const before = await service.cpuMicros();
  await sleep(seconds * 1000);
  const serviceMs = ((await service.cpuMicros()) - before) / 1000 / seconds;
  const shares = cpuBetween(machine, await sampleCpu(service.pid), seconds);
  return { serviceMs, postgresMs: shares?.postgresMs ?? null, otherCpuShare: shares?.otherShare ?? null };
}

async function inBatches<T>(
  items: T[],
  concurrency: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        await work(items[index]!, index);
      }
    }),
  );
}

/** The service's child process and its few questions. */
class ServiceProcess {
  private constructor(
    private readonly child: ChildProcess,
    readonly origin: string,
    readonly pid: number,
  ) {}

  static async start(options: ServiceStart): Promise<ServiceProcess> {
    const child = fork(path.join(BENCH_DIR, 'listener-polls-service.ts'), [], {
      execArgv: ['--expose-gc', '--import', 'tsx'],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const ready = await new Promise<ServiceReply>((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`the service process exited (code ${code}) before it was ready`)));
      child.send(options);
    });
    if (ready.type !== 'ready') {
      child.kill('SIGKILL');
      throw new Error(`the service process did not start: ${ready.type === 'failed' ? ready.error : ready.type}`);
    }
    return new ServiceProcess(child, ready.origin, ready.pid);
  }

  private ask(request: ServiceRequest): Promise<ServiceReply> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the service process did not answer ${request.type} within 60 s`)),
        60_000,
      );
      const onExit = () => reject(new Error('the service process exited'));
      this.child.once('exit', onExit);
      this.child.once('message', (reply: ServiceReply) => {
        clearTimeout(timer);
        this.child.off('exit', onExit);
        resolve(reply);
      });
      this.child.send(request);
    });
  }

  async memory(): Promise<MemorySample> {
    const reply = await this.ask({ type: 'memory' });
    if (reply.type !== 'memory') throw new Error(`expected memory, got ${reply.type}`);
    return reply.memory;
  }

  async cpuMicros(): Promise<number> {
    const reply = await this.ask({ type: 'cpu' });
    if (reply.type !== 'cpu') throw new Error(`expected cpu, got ${reply.type}`);
    return reply.micros;
  }

  async inFlight(): Promise<number> {
    const reply = await this.ask({ type: 'in-flight' });
    if (reply.type !== 'in-flight') throw new Error(`expected in-flight, got ${reply.type}`);
    return reply.count;
  }

  /** Until the service has `count` requests in flight (or fewer, with `atMost`). */
  async untilInFlight(count: number, atMost = false): Promise<void> {
    for (const until = Date.now() + 120_000; Date.now() < until; await sleep(50)) {
      const now = await this.inFlight();
      if (atMost ? now <= count : now >= count) return;
    }
    throw new Error(
      `the service did not reach ${atMost ? 'at most' : 'at least'} ${count} requests in flight within 120 s`,
    );
  }

  /** Graceful: its waiting polls answer, the feed and pool close; killed if it does not end in 30 s. */
  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 30_000);
    this.child.send({ type: 'close' } satisfies ServiceRequest);
    await exited;
    clearTimeout(timer);
  }
}

interface Answer {
  status: number;
  etag: string | null;
  /** performance.now() when the answer's body ended. */
  at: number;
}

/** One simulated listener: its credential, its ETag, and at most one long-poll open. */
class SimulatedListener {
  etag: string | null = null;
  private open: http.ClientRequest | null = null;
  /** Answers this listener got while nothing of it changed. */
  unexpected = 0;

  constructor(
    readonly id: string,
    readonly deploymentId: string,
    private readonly credential: string,
    private readonly origin: string,
    private readonly agent: http.Agent,
  ) {}

  /** GET desired-state: at once without an ETag, else waiting up to `wait` seconds for a change. */
  poll(wait: number): Promise<Answer> {
    const url = new URL(`${this.origin}/v2/listeners/${this.id}/desired-state?wait=${this.etag === null ? 0 : wait}`);
    return new Promise<Answer>((resolve, reject) => {
      const request = http.get(
        url,
        {
          agent: this.agent,
          headers: {
            authorization: `Bearer ${this.credential}`,
            ...(this.etag === null ? {} : { 'if-none-match': this.etag }),
          },
        },
        (response) => {
          response.resume();
          response.on('end', () => {
            this.open = null;
            const etag = typeof response.headers.etag === 'string' ? response.headers.etag : null;
            if (response.statusCode === 200) this.etag = etag;
            if (response.statusCode !== 200 && response.statusCode !== 304)
              reject(new Error(`desired-state of listener ${this.id}: HTTP ${response.statusCode}`));
            else resolve({ status: response.statusCode, etag, at: performance.now() });
          });
          response.on('error', reject);
        },
      );
      request.on('error', (error) => {
        this.open = null;
        reject(error);
      });
      this.open = request;
    });
  }

  /** Ends the open poll, if any, as an agent that stops does. */
  abort(): void {
    this.open?.destroy();
    this.open = null;
  }
}

// ----- the group -----------------------------------------------------------------------------------

export async function runListenerPollBench(ctx: ListenerPollContext): Promise<ListenerPollResults> {
  const { say } = ctx;
  const started = Date.now();
  const n = ctx.listeners;
  const limit = await openFilesLimit();
  // Each open poll is a socket in this process and one in the service's; plus files, pipes, the pool.
  if (limit !== null && limit < n + 512)
    throw new Error(
      `${n} listeners need ${n + 512} open files per process; the limit is ${limit} (raise it with \`ulimit -n ${n + 1024}\`, or pass --listeners ${Math.max(100, limit - 512)})`,
    );

  const name = `slipway_bench_lp_${process.pid}_${randomBytes(3).toString('hex')}`;
  const databaseUrl = await createMigratedDatabase(ctx.serverUrl, name);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-lp-'));
  const apiKey = `slw_bench_${randomBytes(16).toString('hex')}`;
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const listeners: SimulatedListener[] = [];
  let service: ServiceProcess | null = null;
  /** Set once the polls are being ended on purpose: their ends are not failures and are not re-opened. */
  let stopping = false;
  let cleaning: Promise<void> | null = null;
  const cleanup = () =>
    (cleaning ??= (async () => {
      stopping = true;
      for (const l of listeners) l.abort();
      agent.destroy();
      await service?.close();
      await withClient(ctx.serverUrl, (c) =>
        c.query(`drop database if exists ${c.escapeIdentifier(name)} with (force)`),
      );
      await fs.rm(dataDir, { recursive: true, force: true });
    })());
  ctx.defer(cleanup);

  try {
    service = await ServiceProcess.start({ databaseUrl, dataDir, apiKey, logLevel: ctx.logLevel });
    const svc = service;
    say(`listeners: the service runs in process ${svc.pid} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
    const api = async (method: string, url: string, body?: unknown): Promise<any> => {
      const response = await fetch(`${svc.origin}${url}`, {
        method,
        headers: { 'x-api-key': apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await response.text();
      if (response.status >= 300) throw new Error(`${method} ${url}: HTTP ${response.status} ${text.slice(0, 300)}`);
      return text === '' ? undefined : JSON.parse(text);
    };

    // 1. N listeners, each with a credential and a deployment, as users make them.
    say(`listeners: setting up ${n.toLocaleString('en-US')} listeners with a deployment each`);
    const made: SimulatedListener[] = new Array(n);
    await inBatches(
      Array.from({ length: n }, (_, i) => i),
      SETUP_CONCURRENCY,
      async (i) => {
        const listener = await api('POST', '/v2/listeners', {
          compute_type: 'k8s',
          compute_id: `bench-cluster-${i}`,
          compute_config: { k8s_namespaces: ['agents'] },
        });
        const credential = await api('POST', `/v2/listeners/${listener.id}/credentials`);
        const deployment = await api('POST', '/v2/deployments', {
          name: `bench-listener-app-${i}`,
          source: 'external_container',
          source_config: { listener_id: listener.id, resource_spec: { min_scale: 2, cpu: 0.5, memory_mb: 512 } },
          source_revision_config: { image_uri: 'registry.example.com/agents/bench:1.0.0' },
          secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-bench-not-a-real-key' }],
        });
        made[i] = new SimulatedListener(listener.id, deployment.id, credential.credential, svc.origin, agent);
      },
    );
    listeners.push(...made);
    // Each reads its state once, as an agent does first: the ETag its long-polls send back.
    await inBatches(listeners, SETUP_CONCURRENCY, async (l) => {
      await l.poll(0);
    });
    const setupSeconds = (Date.now() - started) / 1000;
    say(`listeners: set up in ${setupSeconds.toFixed(0)} s`);

    let tag = 0;
    /** A new image for the listener's deployment while its poll waits: PATCH sent to the poll's answer. */
    const patchAndAnswer = async (target: SimulatedListener, waiting: Promise<Answer>): Promise<Timing> => {
      const t0 = performance.now();
      await api('PATCH', `/v2/deployments/${target.deploymentId}`, {
        source_revision_config: { image_uri: `registry.example.com/agents/bench:2.0.${++tag}` },
      });
      const patched = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const answer = await Promise.race([
        waiting,
        new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ANSWER_LIMIT_MS))),
      ]);
      clearTimeout(timer);
      if (answer === null)
        throw new Error(`listener ${target.id} got no answer within ${ANSWER_LIMIT_MS / 1000} s of a patch`);
      if (answer.status !== 200)
        throw new Error(`listener ${target.id} got ${answer.status} after a patch, not the new state`);
      return { answer: answer.at - t0, patch: patched - t0, afterPatch: answer.at - patched };
    };

    // 2. One listener long-polling (after a few unmeasured rounds through the same code).
    const single = async (count: number): Promise<PhaseResult> => {
      const target = listeners[0]!;
      const timings: Timing[] = [];
      const machine = await sampleCpu(svc.pid);
      for (let k = 0; k < count; k++) {
        const waiting = target.poll(WAIT_SECONDS);
        // The poll is at the service (reading, or already asleep) before the patch is sent.
        await svc.untilInFlight(1);
        timings.push(await patchAndAnswer(target, waiting));
      }
      return phaseResult(1, timings, 0, cpuBetween(machine, await sampleCpu(svc.pid), count)?.otherShare ?? null);
    };
    await single(WARMUP_PATCHES);
    const singleResult = await single(ctx.patches);
    say(
      `listeners: 1 polling: patch to answer p50 ${singleResult.answer.p50.toFixed(1)} ms p99 ${singleResult.answer.p99.toFixed(1)} ms (the PATCH itself p50 ${singleResult.patch.p50.toFixed(1)} ms)`,
    );
    await svc.untilInFlight(0, true);
    const idle = await svc.memory();
    // The same CPU window with no poll open: what the service spends anyway (timers, the feed, GC).
    const idleCpu = await cpuOver(svc, HOLD_SECONDS);

    // 3. Every listener long-polling at once.
    const waiting = new Map<SimulatedListener, Promise<Answer>>();
    let otherAnswers = 0;
    let measuring: SimulatedListener | null = null;
    // A holder, not a variable: it is set in the polls' callbacks, which the compiler does not follow.
    const failed: { error: Error | null } = { error: null };
    const reopen = (l: SimulatedListener) => {
      const poll = l.poll(WAIT_SECONDS);
      waiting.set(l, poll);
      poll.then(
        (answer) => {
          if (measuring === l || stopping) return;
          // Only the patched listener's poll may get a new state: another 200 woke a listener for
          // nothing. A 304 is a poll whose wait ran out (a phase longer than the wait): poll again.
          if (answer.status === 200) otherAnswers += 1;
          reopen(l);
        },
        (error: unknown) => {
          if (!stopping) failed.error ??= error instanceof Error ? error : new Error(String(error));
        },
      );
    };
    listeners.forEach(reopen);
    await svc.untilInFlight(n);
    await sleep(1_000);
    const holding = await svc.memory();
    const holdCpu = await cpuOver(svc, HOLD_SECONDS);
    say(
      `listeners: ${n} polling: service RSS ${mib(holding.rss)} MiB (idle ${mib(idle.rss)}), heap ${mib(holding.heapUsed)} MiB (idle ${mib(idle.heapUsed)}), CPU ${holdCpu.serviceMs.toFixed(1)} ms/s while nothing changes (idle ${idleCpu.serviceMs.toFixed(1)})`,
    );

    const timings: Timing[] = [];
    const machine = await sampleCpu(svc.pid);
    for (let k = 0; k < ctx.patches; k++) {
      if (failed.error) throw failed.error;
      // Spread over the listeners: every patch concerns another one (while patches <= listeners).
      const target = listeners[Math.floor((k * n) / ctx.patches) % n]!;
      measuring = target;
      timings.push(await patchAndAnswer(target, waiting.get(target)!));
      measuring = null;
      reopen(target);
    }
    if (failed.error) throw failed.error;
    const many = phaseResult(
      n,
      timings,
      otherAnswers,
      cpuBetween(machine, await sampleCpu(svc.pid), ctx.patches)?.otherShare ?? null,
    );
    say(
      `listeners: ${n} polling: patch to answer p50 ${many.answer.p50.toFixed(1)} ms p99 ${many.answer.p99.toFixed(1)} ms (the PATCH itself p50 ${many.patch.p50.toFixed(1)} ms); other listeners answered: ${otherAnswers}`,
    );

    // 4. Every poll ends (the agents go away): what the service keeps afterwards.
    stopping = true;
    for (const l of listeners) l.abort();
    agent.destroy();
    await svc.untilInFlight(0, true);
    const released = await svc.memory();
    return {
      listeners: n,
      patches: ctx.patches,
      single: singleResult,
      many,
      memory: { idle, holding, released },
      holdCpu,
      idleCpu,
      holdSeconds: HOLD_SECONDS,
      setupSeconds,
      elapsedSeconds: (Date.now() - started) / 1000,
    };
  } finally {
    await cleanup();
  }
}
