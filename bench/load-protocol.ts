/**
 * What the bench (bench/run.ts) asks of its load generator (bench/load-worker.ts, a child process) and
 * what it gets back. The generator runs in its own process so that it never shares an event loop with
 * the server it measures.
 *
 * Placeholders: `{slot}` in an HTTP path takes the next value of `slots` (round robin over requests),
 * `{unique}` in an HTTP body becomes `uniquePrefix` plus a counter. A SQL replay substitutes whole
 * strings inside the captured parameters (ids and unique names are long enough never to collide).
 */

/** HTTP load through autocannon. */
export interface HttpJob {
  kind: 'http';
  /** Base URL, e.g. http://127.0.0.1:41234 */
  origin: string;
  method: 'GET' | 'POST' | 'PATCH';
  /** Path and query; may contain `{slot}`. */
  path: string;
  slots: string[];
  /** JSON body; may contain `{unique}`. */
  body: string | null;
  uniquePrefix: string;
  headers: Record<string, string>;
  expectStatus: number;
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  /** Upper bound of requests in the measured phase (the duration usually ends it first). */
  maxRequests: number;
  /**
   * Requests per second over all connections (autocannon's overallRate), for a probe that measures
   * latency at a fixed load; absent: as fast as the connections go.
   */
  rate?: number;
}

/** One statement as the service sent it to PostgreSQL (captured through Kysely's log hook). */
export interface CapturedStatement {
  sql: string;
  parameters: unknown[];
}

/**
 * Replays the statements one request made, with the same concurrency, straight through `pg`.
 * Per iteration: `rotate` placeholders take the iteration's slot value; `fresh` placeholders take a
 * new value (a UUID, or prefix + counter); a `carry` placeholder holds per-slot state that becomes the
 * value the `becomes` placeholder had once the iteration committed (a patch's "latest revision").
 */
export interface SqlJob {
  kind: 'sql';
  databaseUrl: string;
  poolSize: number;
  concurrency: number;
  /** Send each statement as a named prepared statement (the --prepared-statements experiment). */
  prepared: boolean;
  statements: CapturedStatement[];
  rotate: { placeholder: string; values: string[] }[];
  fresh: { placeholder: string; prefix: string | null }[];
  carry: { placeholder: string; values: string[]; becomes: string } | null;
  warmupSeconds: number;
  durationSeconds: number;
  maxRequests: number;
}

export type LoadJob = HttpJob | SqlJob;

export interface LoadResult {
  /** Completed requests (HTTP: with the expected status; SQL: without error) in the measured phase. */
  requests: number;
  seconds: number;
  rps: number;
  /** Latency percentiles in milliseconds. */
  p50: number;
  p99: number;
  /** Socket errors, timeouts, failed statements, or responses with another status. */
  failures: number;
  firstFailure: string | null;
  /** Requests of the warm-up and the measured phase together (for CPU time per request). */
  allRequests: number;
}

export type WorkerReply = { ok: true; result: LoadResult } | { ok: false; error: string };

/** Collects latencies (ms) and reports percentiles by sorting: exact, and cheap at these counts. */
export class LatencyRecorder {
  private values = new Float64Array(1 << 16);
  private count = 0;

  record(ms: number): void {
    if (this.count === this.values.length) {
      const bigger = new Float64Array(this.values.length * 2);
      bigger.set(this.values);
      this.values = bigger;
    }
    this.values[this.count++] = ms;
  }

  get size(): number {
    return this.count;
  }

  percentile(p: number): number {
    if (this.count === 0) return Number.NaN;
    const sorted = this.values.slice(0, this.count).sort();
    const index = Math.min(this.count - 1, Math.max(0, Math.ceil((p / 100) * this.count) - 1));
    return sorted[index]!;
  }
}
