/**
 * The app edge's traffic and the instances' resources as time series, per route of the edge (a
 * deployment's own host label, or an endpoint's `<slug>--<name>`) and per revision: requests, errors by
 * class, a latency histogram, CPU and memory, in 10-second buckets over the last hour (docs/metrics.md,
 * "Series per revision").
 *
 * Kept in memory only, in a fixed number of buckets per series: what an hour of any traffic costs is
 * bounded (the buckets hold counts, never requests), and nothing is written per request. What is lost on
 * a restart of the service is the last hour's series; /metrics (Prometheus) is where history is kept.
 *
 * Both edges feed `record` (HAProxy through its request log, src/dataplane/edge-request-log.ts; the
 * built-in edge directly); the local data plane feeds `sampleUsage` from the instances' cgroups.
 */
import { statusClass } from './edge-stats.ts';

/** Width of a bucket. */
export const BUCKET_SECONDS = 10;
/** Buckets kept per series: one hour. */
export const BUCKETS = 360;

/**
 * Upper bounds of the latency histogram's buckets (seconds): ten per decade (each at most a third above the
 * one before), 1 ms to 100 s. /metrics shows the 1-2.5-5 ones of them (PROMETHEUS_BOUNDS).
 */
export const LATENCY_BOUNDS: readonly number[] = [0.001, 0.01, 0.1, 1, 10]
  .flatMap((decade) => [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8].map((m) => Number((decade * m).toPrecision(3))))
  .concat([100]);

/** The buckets of the latency histograms on /metrics: a subset of LATENCY_BOUNDS, so their counts are exact. */
export const PROMETHEUS_BOUNDS: readonly number[] = LATENCY_BOUNDS.filter((b) =>
  [1, 2.5, 5].includes(Number((b / 10 ** Math.floor(Math.log10(b) + 1e-9)).toPrecision(3))),
);

/** The error classes of a series: the app's own 4xx and 5xx, and the edge's own answers. */
export const ERROR_CLASSES = ['4xx', '5xx', 'edge'] as const;
export type ErrorClass = (typeof ERROR_CLASSES)[number];

/** One request as an edge saw it. */
export interface RequestRecord {
  /** The route's host label (`<slug>` or `<slug>--<endpoint>`). */
  label: string;
  /** The revision of the instance that answered; null when none did (no instance, none answered). */
  revisionId: string | null;
  status: number;
  /** Time from the request's arrival to the end of its response. */
  seconds: number;
  /** The edge answered itself: no instance, none accepted the connection, it did not answer in time. */
  edgeAnswer: boolean;
}

/** What the instances of one route and revision use now (summed over its instances). */
export interface UsageSample {
  label: string;
  revisionId: string;
  /** Per instance: its CPU seconds so far (a counter that starts again with a restart) and memory now. */
  instances: { instanceId: string; cpuSeconds: number | null; memoryBytes: number | null }[];
}

interface Bucket {
  /** Index of the bucket since the epoch (time / BUCKET_SECONDS). */
  at: number;
  requests: number;
  errors: Record<ErrorClass, number>;
  /** Latency counts by LATENCY_BOUNDS (last: above the last bound); allocated on the first request. */
  latency: Uint32Array | null;
  /** Requests the edge received but could not record (its buffer was full). */
  dropped: number;
  cpuSeconds: number | null;
  memoryBytes: number | null;
}

interface Series {
  label: string;
  revisionId: string | null;
  buckets: (Bucket | undefined)[];
  /** Counts since the series began (for /metrics): they start again when the series is forgotten. */
  total: SeriesTotal;
}

/** What a route and revision counted since its series began, for /metrics. */
export interface SeriesTotal {
  label: string;
  revisionId: string | null;
  requests: number;
  errors: Record<ErrorClass, number>;
  /** Counts by LATENCY_BOUNDS (not cumulative), the last beyond them. */
  latency: Uint32Array;
  latencySum: number;
}

/** One step of a series as served. */
export interface SeriesPoint {
  /** Start of the step (ms since the epoch). */
  at: number;
  requests: number;
  errors: Record<ErrorClass, number>;
  latency: { p50: number | null; p90: number | null; p99: number | null };
  /** Mean CPU cores over the step; null when nothing was sampled. */
  cpuCores: number | null;
  /** Highest memory sampled in the step; null when nothing was sampled. */
  memoryBytes: number | null;
  dropped: number;
}

export interface SeriesOfRoute {
  label: string;
  revisionId: string | null;
  points: SeriesPoint[];
  total: Omit<SeriesPoint, 'at' | 'cpuCores' | 'memoryBytes'>;
}

export interface TrafficSeries {
  record(request: RequestRecord): void;
  /** Requests of a route that arrived but could not be recorded (the edge's buffer was full). */
  dropped(label: string, count: number): void;
  /** The instances' usage now, for every running route (an absent route's instances are forgotten). */
  sampleUsage(samples: readonly UsageSample[]): void;
  /** The series of these routes over the last `windowSeconds`, in steps of `stepSeconds` (multiples of 10 s). */
  query(labels: readonly string[], windowSeconds: number, stepSeconds: number): SeriesOfRoute[];
  /** Every series' counts since it began. */
  totals(): SeriesTotal[];
}

const zeroErrors = (): Record<ErrorClass, number> => ({ '4xx': 0, '5xx': 0, edge: 0 });

/** The error class of an answer, or null for a success (1xx to 3xx). */
export function errorClassOf(status: number, edgeAnswer: boolean): ErrorClass | null {
  if (edgeAnswer) return 'edge';
  const cls = statusClass(status);
  // A status outside 100..599 is a request the client gave up before any answer: not an error of the app.
  return cls === '4xx' || cls === '5xx' ? cls : null;
}

/** The bucket of the histogram a time falls into. */
export function latencyIndex(seconds: number): number {
  let lo = 0;
  let hi = LATENCY_BOUNDS.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (seconds <= LATENCY_BOUNDS[mid]!) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * The q-quantile of a histogram, interpolated inside its bucket (so within a third of the true value); the
 * last bucket (beyond 100 s) says its lower bound. Null for an empty histogram.
 */
export function quantile(counts: ArrayLike<number>, q: number): number | null {
  let total = 0;
  for (let i = 0; i < counts.length; i++) total += counts[i]!;
  if (total === 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    const n = counts[i]!;
    if (n === 0) continue;
    if (seen + n >= rank) {
      const lower = i === 0 ? 0 : LATENCY_BOUNDS[i - 1]!;
      if (i >= LATENCY_BOUNDS.length) return lower;
      const upper = LATENCY_BOUNDS[i]!;
      return lower + ((upper - lower) * Math.max(0, rank - seen)) / n;
    }
    seen += n;
  }
  return LATENCY_BOUNDS[LATENCY_BOUNDS.length - 1]!;
}

/**
 * One series over a window of `steps` steps of `perStep` buckets each, from bucket `first` to the
 * current bucket `last`; null when none of its buckets in the window holds anything.
 */
function seriesOver(
  s: Series,
  window: { first: number; last: number; steps: number; perStep: number },
): SeriesOfRoute | null {
  const { first, last, steps, perStep } = window;
  const points: SeriesPoint[] = [];
  const totalLatency = new Uint32Array(LATENCY_BOUNDS.length + 1);
  const total = { requests: 0, errors: zeroErrors(), dropped: 0 };
  let any = false;
  for (let step = 0; step < steps; step++) {
    const start = first + step * perStep;
    const latency = new Uint32Array(LATENCY_BOUNDS.length + 1);
    const point: SeriesPoint = {
      at: start * BUCKET_SECONDS * 1000,
      requests: 0,
      errors: zeroErrors(),
      latency: { p50: null, p90: null, p99: null },
      cpuCores: null,
      memoryBytes: null,
      dropped: 0,
    };
    let cpu: number | null = null;
    for (let at = start; at < start + perStep; at++) {
      if (at < last - BUCKETS + 1) continue;
      const bucket = s.buckets[at % BUCKETS];
      if (bucket === undefined || bucket.at !== at) continue;
      any = true;
      point.requests += bucket.requests;
      point.dropped += bucket.dropped;
      for (const cls of ERROR_CLASSES) point.errors[cls] += bucket.errors[cls];
      if (bucket.latency) for (let i = 0; i < latency.length; i++) latency[i]! += bucket.latency[i]!;
      if (bucket.cpuSeconds !== null) cpu = (cpu ?? 0) + bucket.cpuSeconds;
      if (bucket.memoryBytes !== null) point.memoryBytes = Math.max(point.memoryBytes ?? 0, bucket.memoryBytes);
    }
    point.cpuCores = cpu === null ? null : cpu / (perStep * BUCKET_SECONDS);
    point.latency = { p50: quantile(latency, 0.5), p90: quantile(latency, 0.9), p99: quantile(latency, 0.99) };
    for (let i = 0; i < latency.length; i++) totalLatency[i]! += latency[i]!;
    total.requests += point.requests;
    total.dropped += point.dropped;
    for (const cls of ERROR_CLASSES) total.errors[cls] += point.errors[cls];
    points.push(point);
  }
  if (!any) return null;
  return {
    label: s.label,
    revisionId: s.revisionId,
    points,
    total: {
      ...total,
      latency: {
        p50: quantile(totalLatency, 0.5),
        p90: quantile(totalLatency, 0.9),
        p99: quantile(totalLatency, 0.99),
      },
    },
  };
}

export function createTrafficSeries(now: () => number = Date.now): TrafficSeries {
  const series = new Map<string, Series>();
  /** Each instance's CPU seconds at the last sample, to count what it used since. */
  const lastCpu = new Map<string, number>();
  const keyOf = (label: string, revisionId: string | null) => `${label} ${revisionId ?? ''}`;

  function seriesOf(label: string, revisionId: string | null): Series {
    const key = keyOf(label, revisionId);
    let found = series.get(key);
    if (!found) {
      const total = {
        label,
        revisionId,
        requests: 0,
        errors: zeroErrors(),
        latency: new Uint32Array(LATENCY_BOUNDS.length + 1),
        latencySum: 0,
      };
      found = { label, revisionId, buckets: new Array<Bucket | undefined>(BUCKETS), total };
      series.set(key, found);
    }
    return found;
  }

  function bucketOf(s: Series, at: number): Bucket {
    const slot = at % BUCKETS;
    let bucket = s.buckets[slot];
    if (bucket === undefined || bucket.at !== at) {
      bucket = {
        at,
        requests: 0,
        errors: zeroErrors(),
        latency: null,
        dropped: 0,
        cpuSeconds: null,
        memoryBytes: null,
      };
      s.buckets[slot] = bucket;
    }
    return bucket;
  }

  const currentBucket = () => Math.floor(now() / 1000 / BUCKET_SECONDS);

  /** Forgets series with nothing in the last hour. */
  function prune(): void {
    const oldest = currentBucket() - BUCKETS + 1;
    for (const [key, s] of series) if (!s.buckets.some((b) => b !== undefined && b.at >= oldest)) series.delete(key);
  }
  let lastPrune = 0;

  function maybePrune(at: number): void {
    if (at - lastPrune < 6) return;
    lastPrune = at;
    prune();
  }

  return {
    record(request) {
      const at = currentBucket();
      maybePrune(at);
      const s = seriesOf(request.label, request.revisionId);
      const bucket = bucketOf(s, at);
      const seconds = Math.max(0, request.seconds);
      const index = latencyIndex(seconds);
      bucket.requests += 1;
      s.total.requests += 1;
      const cls = errorClassOf(request.status, request.edgeAnswer);
      if (cls !== null) {
        bucket.errors[cls] += 1;
        s.total.errors[cls] += 1;
      }
      bucket.latency ??= new Uint32Array(LATENCY_BOUNDS.length + 1);
      bucket.latency[index]! += 1;
      s.total.latency[index]! += 1;
      s.total.latencySum += seconds;
    },

    dropped(label, count) {
      if (count > 0) bucketOf(seriesOf(label, null), currentBucket()).dropped += count;
    },

    sampleUsage(samples) {
      const at = currentBucket();
      const seen = new Set<string>();
      for (const sample of samples) {
        const bucket = bucketOf(seriesOf(sample.label, sample.revisionId), at);
        let cpu: number | null = null;
        let memory: number | null = null;
        for (const instance of sample.instances) {
          const key = `${keyOf(sample.label, sample.revisionId)} ${instance.instanceId}`;
          seen.add(key);
          if (instance.cpuSeconds !== null) {
            const before = lastCpu.get(key);
            // A restarted instance counts from 0 again: what it shows now is what it used since.
            const used =
              before === undefined
                ? 0
                : instance.cpuSeconds >= before
                  ? instance.cpuSeconds - before
                  : instance.cpuSeconds;
            lastCpu.set(key, instance.cpuSeconds);
            cpu = (cpu ?? 0) + used;
          }
          if (instance.memoryBytes !== null) memory = (memory ?? 0) + instance.memoryBytes;
        }
        if (cpu !== null) bucket.cpuSeconds = (bucket.cpuSeconds ?? 0) + cpu;
        if (memory !== null) bucket.memoryBytes = Math.max(bucket.memoryBytes ?? 0, memory);
      }
      for (const key of [...lastCpu.keys()]) if (!seen.has(key)) lastCpu.delete(key);
      maybePrune(at);
    },

    totals: () => [...series.values()].map((s) => s.total),

    query(labels, windowSeconds, stepSeconds) {
      const perStep = Math.max(1, Math.round(stepSeconds / BUCKET_SECONDS));
      const steps = Math.max(1, Math.ceil(windowSeconds / BUCKET_SECONDS / perStep));
      const last = currentBucket();
      // Steps end with the current bucket; the first starts steps * perStep buckets before its end.
      const first = last - steps * perStep + 1;
      const wanted = new Set(labels);
      const out: SeriesOfRoute[] = [];
      for (const s of series.values()) {
        if (!wanted.has(s.label)) continue;
        const route = seriesOver(s, { first, last, steps, perStep });
        if (route !== null) out.push(route);
      }
      return out;
    },
  };
}
