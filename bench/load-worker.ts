/**
 * The load generator: a child process forked by bench/run.ts. It takes one job at a time over IPC
 * (see load-protocol.ts), runs it, answers with the measured result, and exits when its parent
 * disconnects. HTTP load comes from autocannon; the SQL baseline is a loop of `concurrency` workers
 * replaying captured statements on a `pg` pool.
 */
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import pg from 'pg';
import { statementName } from './prepared-statements.ts';
import {
  LatencyRecorder,
  type HttpJob,
  type LoadJob,
  type LoadResult,
  type SqlJob,
  type WorkerReply,
} from './load-protocol.ts';

interface Phase {
  recorder: LatencyRecorder;
  failures: number;
  firstFailure: string | null;
  seconds: number;
}

function fail(phase: Phase, message: string): void {
  phase.failures += 1;
  phase.firstFailure ??= message;
}

function summary(phase: Phase, warmup: Phase | null): LoadResult {
  return {
    allRequests: phase.recorder.size + phase.failures + (warmup ? warmup.recorder.size + warmup.failures : 0),
    requests: phase.recorder.size,
    seconds: phase.seconds,
    rps: phase.recorder.size / phase.seconds,
    p50: phase.recorder.percentile(50),
    p99: phase.recorder.percentile(99),
    failures: phase.failures,
    firstFailure: phase.firstFailure,
  };
}

async function runHttp(job: HttpJob): Promise<LoadResult> {
  // Counters live across warm-up and measurement: unique values must never repeat.
  let next = 0;
  let unique = 0;
  const setupRequest = (request: autocannon.Request): autocannon.Request => {
    if (job.slots.length > 0) request.path = job.path.replace('{slot}', job.slots[next++ % job.slots.length]!);
    if (job.body !== null && job.body.includes('{unique}'))
      request.body = job.body.replace('{unique}', `${job.uniquePrefix}${(unique++).toString(36)}`);
    return request;
  };
  const phase = async (seconds: number, maxRequests: number): Promise<Phase> => {
    const result: Phase = { recorder: new LatencyRecorder(), failures: 0, firstFailure: null, seconds };
    const started = process.hrtime.bigint();
    await new Promise<void>((resolve, reject) => {
      const instance = autocannon(
        {
          url: job.origin,
          connections: job.connections,
          duration: seconds,
          maxOverallRequests: maxRequests,
          ...(job.rate !== undefined ? { overallRate: job.rate } : {}),
          timeout: 30,
          requests: [
            {
              method: job.method,
              path: job.path,
              headers: job.headers,
              ...(job.body !== null ? { body: job.body } : {}),
              setupRequest,
            },
          ],
        },
        (error: unknown) =>
          // eslint-disable-next-line @typescript-eslint/no-base-to-string -- `error` is unknown, only narrowed to {} by the truthiness test: String() is the fallback for a non-Error
          error ? reject(error instanceof Error ? error : new Error(String(error))) : resolve(),
      );
      instance.on('response', (_client, statusCode, _bytes, responseTime) => {
        if (statusCode === job.expectStatus) result.recorder.record(responseTime);
        else fail(result, `HTTP ${statusCode} from ${job.method} ${job.path}`);
      });
      instance.on('reqError', (error: unknown) =>
        fail(result, `request error: ${error instanceof Error ? error.message : String(error)}`),
      );
    });
    result.seconds = Number(process.hrtime.bigint() - started) / 1e9;
    return result;
  };
  const warmup = job.warmupSeconds > 0 ? await phase(job.warmupSeconds, job.maxRequests) : null;
  return summary(await phase(job.durationSeconds, job.maxRequests), warmup);
}

function substitute(value: unknown, replacements: [string, string][]): unknown {
  if (typeof value !== 'string') return value;
  let out = value;
  for (const [from, to] of replacements) if (out.includes(from)) out = out.replaceAll(from, to);
  return out;
}

async function runSql(job: SqlJob): Promise<LoadResult> {
  const pool = new pg.Pool({ connectionString: job.databaseUrl, max: job.poolSize });
  pool.on('error', () => undefined); // an idle client's broken connection is replaced by the pool
  const slotCount = Math.max(1, ...job.rotate.map((r) => r.values.length), job.carry?.values.length ?? 0);
  const carried = job.carry ? [...job.carry.values] : [];
  let iteration = 0;
  let unique = 0;

  /** One request's worth of statements on one pooled connection, as the service sends them. */
  const once = async (): Promise<void> => {
    const slot = iteration++ % slotCount;
    const replacements: [string, string][] = [];
    for (const r of job.rotate) replacements.push([r.placeholder, r.values[slot % r.values.length]!]);
    const fresh = new Map<string, string>();
    for (const f of job.fresh) {
      const value = f.prefix === null ? randomUUID() : `${f.prefix}${(unique++).toString(36)}`;
      fresh.set(f.placeholder, value);
      replacements.push([f.placeholder, value]);
    }
    if (job.carry) replacements.push([job.carry.placeholder, carried[slot]!]);
    const client = await pool.connect();
    try {
      for (const statement of job.statements) {
        const values = statement.parameters.map((p) => substitute(p, replacements));
        if (job.prepared) await client.query({ name: statementName(statement.sql), text: statement.sql, values });
        else await client.query(statement.sql, values);
      }
    } catch (error) {
      await client.query('rollback').catch(() => undefined); // harmless outside a transaction; the error is reported below
      throw error;
    } finally {
      client.release();
    }
    if (job.carry) carried[slot] = fresh.get(job.carry.becomes)!;
  };

  const phase = async (seconds: number): Promise<Phase> => {
    const result: Phase = { recorder: new LatencyRecorder(), failures: 0, firstFailure: null, seconds };
    const started = process.hrtime.bigint();
    const until = started + BigInt(Math.round(seconds * 1e9));
    let issued = 0;
    const loop = async () => {
      while (process.hrtime.bigint() < until && issued < job.maxRequests) {
        issued += 1;
        const t0 = process.hrtime.bigint();
        try {
          await once();
          result.recorder.record(Number(process.hrtime.bigint() - t0) / 1e6);
        } catch (error) {
          fail(result, error instanceof Error ? error.message : String(error));
        }
      }
    };
    await Promise.all(Array.from({ length: job.concurrency }, loop));
    result.seconds = Number(process.hrtime.bigint() - started) / 1e9;
    return result;
  };

  try {
    const warmup = job.warmupSeconds > 0 ? await phase(job.warmupSeconds) : null;
    return summary(await phase(job.durationSeconds), warmup);
  } finally {
    await pool.end();
  }
}

async function run(job: LoadJob): Promise<LoadResult> {
  return job.kind === 'http' ? runHttp(job) : runSql(job);
}

if (!process.send) {
  process.stderr.write('bench/load-worker.ts is started by bench/run.ts (it needs an IPC channel)\n');
  process.exit(2);
}
const reply = (message: WorkerReply) => process.send!(message);
process.on('message', (job: LoadJob) => {
  run(job).then(
    (result) => reply({ ok: true, result }),
    (error: unknown) =>
      reply({ ok: false, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
  );
});
process.on('disconnect', () => process.exit(0));
