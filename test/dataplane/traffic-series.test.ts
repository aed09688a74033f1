/**
 * The series store of the app edge (src/dataplane/traffic-series.ts): buckets by time on a moved clock,
 * percentiles from the histogram, CPU from counters that restart, and an hour's limit.
 */
import assert from 'node:assert/strict';
import { createTrafficSeries, quantile, latencyIndex, LATENCY_BOUNDS } from '../../src/dataplane/traffic-series.ts';
import { test } from '../support/limited-test.ts';

const R1 = 'r1';

test('percentiles come from the histogram, in order, within its 25%', () => {
  const counts = new Array<number>(LATENCY_BOUNDS.length + 1).fill(0);
  for (let i = 0; i < 98; i++) counts[latencyIndex(0.002)]! += 1;
  counts[latencyIndex(0.5)]! += 2;
  const p50 = quantile(counts, 0.5)!;
  const p99 = quantile(counts, 0.99)!;
  assert.ok(p50 > 0.0015 && p50 <= 0.0025, String(p50));
  assert.ok(p99 > 0.4 && p99 <= 0.625, String(p99));
  assert.equal(quantile(new Array<number>(LATENCY_BOUNDS.length + 1).fill(0), 0.5), null);
});

test('requests fall into steps by time; the hour keeps 360 buckets and no more', () => {
  let now = Date.UTC(2026, 0, 1, 12, 0, 0);
  const series = createTrafficSeries(() => now);
  series.record({ label: 'a', revisionId: R1, status: 200, seconds: 0.01, edgeAnswer: false });
  now += 10_000;
  series.record({ label: 'a', revisionId: R1, status: 404, seconds: 0.01, edgeAnswer: false });
  series.record({ label: 'a', revisionId: R1, status: 500, seconds: 0.01, edgeAnswer: false });
  series.record({ label: 'a', revisionId: null, status: 503, seconds: 0, edgeAnswer: true });
  series.record({ label: 'b', revisionId: R1, status: 200, seconds: 0.01, edgeAnswer: false });
  const [a] = series.query(['a'], 60, 10).filter((s) => s.revisionId === R1);
  assert.equal(a!.points.length, 6);
  assert.deepEqual(
    a!.points.slice(-2).map((p) => [p.requests, p.errors['4xx'], p.errors['5xx']]),
    [
      [1, 0, 0],
      [2, 1, 1],
    ],
  );
  assert.equal(series.query(['a'], 60, 10).find((s) => s.revisionId === null)!.total.errors.edge, 1);
  assert.equal(series.query(['b', 'c'], 60, 10).length, 1, 'only the routes asked for');
  now += 3600_000;
  assert.deepEqual(series.query(['a'], 3600, 60), [], 'older than an hour: gone');
});

test('CPU is what the instances used since the last sample, a restarted one counted from zero', () => {
  let now = Date.UTC(2026, 0, 1, 12, 0, 0);
  const series = createTrafficSeries(() => now);
  const sample = (cpuSeconds: number, memoryBytes: number) =>
    series.sampleUsage([{ label: 'a', revisionId: R1, instances: [{ instanceId: 'web-0', cpuSeconds, memoryBytes }] }]);
  sample(100, 1000);
  now += 10_000;
  sample(105, 3000);
  now += 10_000;
  sample(2, 2000);
  const [a] = series.query(['a'], 60, 10);
  assert.deepEqual(
    a!.points.slice(-3).map((p) => [p.cpuCores, p.memoryBytes]),
    [
      [0, 1000],
      [0.5, 3000],
      [0.2, 2000],
    ],
  );
});
