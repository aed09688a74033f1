/**
 * The automatic rollback of traffic splits (docs/app-urls.md, "Automatic rollback"): real requests through
 * each edge (HAProxy where it is installed, whose request log feeds the series, and the built-in one) to two
 * stand-in revisions, the edge's series per revision, and the monitor, which takes back a split whose
 * revision answers 5xx (through the split service, with an event naming the numbers) and leaves alone one
 * that answers well, or one with too few requests to judge. test/dataplane/split-rollback-worker.test.ts is
 * the same through the real worker.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { findExecutable } from '../../src/dataplane/executables.ts';
import { createLogger } from '../../src/logger.ts';
import { createSplitService } from '../../src/service/endpoint-splits.ts';
import { createSplitRollbackMonitor } from '../../src/service/split-rollback-monitor.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { localEdgeConfig } from '../support/edge-config.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let edge: AppEdge;
const servers: http.Server[] = [];

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(async () => {
  for (const server of servers) await new Promise<void>((resolve) => server.close(() => resolve()));
  await t.close();
});

/** Serves the apps through an edge of this kind for the tests of one describe. */
function edgeFor(kind: 'haproxy' | 'builtin'): void {
  let dataDir: string;
  before(async () => {
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-rollback-'));
    edge = await startAppEdge({
      config: localEdgeConfig(dataDir, kind),
      logger: createLogger('silent'),
    });
  });
  after(async () => {
    await edge.close();
    await fs.rm(dataDir, { recursive: true, force: true });
  });
}

async function instance(revisionId: string, status: number) {
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(status).end(revisionId);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { instanceId: 'web-0', port: (server.address() as AddressInfo).port, revisionId };
}

/** A deployment, its endpoint `production` at revision A, a split to B with a rollback, served at the edge. */
async function splitServed(name: string, bStatus: number) {
  const made = await api.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: `registry.example.com/${name}:1` },
  });
  await api.patch(`/v2/deployments/${made.body.id}`, {
    source_revision_config: { image_uri: `registry.example.com/${name}:2` },
  });
  await t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYED' })
    .where('deployment_id', '=', made.body.id)
    .execute();
  const [a, b] = (await api.get(`/v2/deployments/${made.body.id}/revisions`)).body.resources
    .map((r: { id: string }) => r.id)
    .reverse() as [string, string];
  await api.put(`/v2/deployments/${made.body.id}/endpoints/production`, { revision_id: a });
  const split = await api.put(`/v2/deployments/${made.body.id}/endpoints/production/split`, {
    revision_id: b,
    weight: 50,
    rollback: { window_seconds: 60, min_requests: 40 },
  });
  assert.equal(split.status, 200, JSON.stringify(split.body));
  // As the worker reports once B's instances are healthy and routed.
  await t.database.db
    .updateTable('deployment_endpoints')
    .set({ split_served_revision_id: b })
    .where('deployment_id', '=', made.body.id)
    .execute();
  const { app_slug } = await t.database.db
    .selectFrom('deployments')
    .select('app_slug')
    .where('id', '=', made.body.id)
    .executeTakeFirstOrThrow();
  const label = `${app_slug}--production`;
  await edge.setTargets(label, [await instance(a, 200)]);
  await edge.setSplit(label, { baseRevisionId: a, revisionId: b, weight: 50, targets: [await instance(b, bStatus)] });
  return { id: made.body.id as string, label, a, b };
}

/** Sends `count` requests to the route, and waits until the edge's series count them (HAProxy's log is sent apart). */
async function send(label: string, count: number): Promise<void> {
  const before = recorded(label);
  for (let i = 0; i < count; i++)
    await new Promise<void>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port: edge.port, path: `/${i}`, headers: { host: `${label}.localhost` } }, (res) => {
          res.resume();
          res.on('end', resolve);
        })
        .on('error', reject);
    });
  await eventually(`the edge to record ${count} requests to ${label}`, () => recorded(label) >= before + count);
}

/** The requests to the route that the edge's series hold, both revisions. */
function recorded(label: string): number {
  return edge.traffic.query([label], 3600, 3600).reduce((sum, series) => sum + series.total.requests, 0);
}

const monitor = () =>
  createSplitRollbackMonitor({
    db: t.database.db,
    splits: createSplitService({ db: t.database.db, resources: null }),
    traffic: () => edge.traffic,
    logger: createLogger('silent'),
  });

// HAProxy where it is installed (the edge the service takes by default), and the built-in edge.
const kinds = (await findExecutable('haproxy')) === null ? (['builtin'] as const) : (['haproxy', 'builtin'] as const);

for (const kind of kinds)
  describe(`automatic rollback through the ${kind} edge`, () => {
    edgeFor(kind);

    test('a split whose revision answers 5xx is taken back by itself, the event naming the numbers', async () => {
      const d = await splitServed(`failing-canary-${kind}`, 500);
      // Too few requests decide nothing, however bad.
      await send(d.label, 10);
      assert.equal(await monitor().check(), 0);
      assert.notEqual((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split, null);
      await send(d.label, 200);
      assert.equal(await monitor().check(), 1);
      assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split, null);
      const event = await t.database.db
        .selectFrom('events')
        .select(['type', 'data'])
        .where('deployment_id', '=', d.id)
        .where('type', '=', 'deployment.endpoint_split_rolled_back')
        .executeTakeFirstOrThrow();
      assert.equal(event.data.reason, 'error_rate');
      assert.equal(event.data.split_revision_id, d.b);
      assert.equal((event.data.split as { error_rate: number }).error_rate, 1);
      assert.equal((event.data.base as { error_rate: number }).error_rate, 0);
      assert.match(String(event.data.message), /5xx rate 100\.0% over \d+ requests/);
      // Taken back once: a second pass finds nothing to do.
      assert.equal(await monitor().check(), 0);
    });

    test('a split whose revision answers well is left alone', async () => {
      const d = await splitServed(`healthy-canary-${kind}`, 200);
      await send(d.label, 200);
      assert.equal(await monitor().check(), 0);
      const split = (await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split;
      assert.equal(split.revision_id, d.b);
    });
  });
