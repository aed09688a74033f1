/**
 * A deployment's series per endpoint and revision (GET /v2/deployments/{id}/metrics), through each real
 * edge: counts by class are exactly what the client saw, the slow route puts p99 above p50, an endpoint
 * moved to another revision shows both revisions side by side, and CPU and memory come from the cgroups.
 */
import assert from 'node:assert/strict';
import { oneFileApp, requestApp, startTestService, uploadApp, waitForRevision } from './data-plane-harness.ts';
import type { TestService } from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SERVER = `
import http from 'node:http';
http.createServer((req, res) => {
  if (req.url === '/slow') { setTimeout(() => { res.writeHead(200); res.end('slow'); }, 400); return; }
  if (req.url === '/missing') { res.writeHead(404); res.end('no'); return; }
  if (req.url === '/boom') { res.writeHead(500); res.end('boom'); return; }
  if (req.url === '/exit') { res.writeHead(200, { connection: 'close' }); res.end('bye'); setTimeout(() => process.exit(3), 20); return; }
  res.writeHead(200); res.end(process.env.VERSION);
}).listen(Number(process.env.PORT), process.env.HOST);
`;
const app = (version: string) =>
  oneFileApp(SERVER, { health_check_path: '/', database: false, env: { VERSION: version } });

const endpointUrl = (url: string, name: string) => {
  const parsed = new URL(url);
  const [slug, ...rest] = parsed.hostname.split('.');
  return `${parsed.protocol}//${slug}--${name}.${rest.join('.')}:${parsed.port}`;
};

interface Observed {
  requests: number;
  '4xx': number;
  '5xx': number;
  edge: number;
}
/** The edge's 503s (no instance to send to): those belong to no revision. */
let noInstance = 0;
/**
 * Requests whose connection was cut without an answer (an instance that exits under a kept-alive
 * connection of the edge): counted as requests, their class is the edge's to tell.
 */
let hangups = 0;

/** Sends the requests and counts what the client saw, by the series' classes. */
async function send(service: TestService, url: string, paths: string[], seen: Observed): Promise<void> {
  for (const path of paths) {
    const status = await requestApp(service, url, path).then(
      (answer) => answer.status,
      () => 0,
    );
    seen.requests += 1;
    if (status === 0) hangups += 1;
    if (status === 404) seen['4xx'] += 1;
    else if (status === 500) seen['5xx'] += 1;
    else if (status >= 502) seen.edge += 1;
    if (status === 503) noInstance += 1;
  }
}

const fresh = (): Observed => ({ requests: 0, '4xx': 0, '5xx': 0, edge: 0 });

async function scenario(edge: 'haproxy' | 'builtin'): Promise<void> {
  const service = await startTestService({ SLIPWAY_EDGE_PROXY: edge });
  noInstance = 0;
  hangups = 0;
  try {
    assert.equal(service.edge.kind, edge);
    const created = await service.api('POST', '/v2/deployments', {
      name: `series-${edge}`,
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: await uploadApp(service, app('one')),
        framework_config_path: 'slipway.json',
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const first = await waitForRevision(service, id, created.body.latest_revision_id);
    assert.equal(first.status, 'DEPLOYED', JSON.stringify(first));
    const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;

    // The deployment's own URL: fast and slow answers, the app's 404 and 500.
    const own = fresh();
    const fast = Array.from({ length: 30 }, () => '/');
    await send(service, url, [...fast, '/slow', '/slow', '/missing', '/missing', '/missing', '/boom'], own);
    // An instance that exits: the edge answers itself (none accepted the connection, or none is running)
    // until the supervisor has started it again.
    const ownEdge = fresh();
    await eventually(
      'the edge answers for an instance that exited',
      async () => {
        await send(service, url, ['/exit'], own);
        for (let i = 0; i < 40 && ownEdge.edge === 0; i++) await send(service, url, ['/'], ownEdge);
        return ownEdge.edge > 0;
      },
      { seconds: 60 },
    );
    await eventually('the instance is back', async () => {
      const probe = fresh();
      await send(service, url, ['/'], probe);
      ownEdge.requests += probe.requests;
      ownEdge.edge += probe.edge;
      return probe.edge === 0;
    });
    own.requests += ownEdge.requests;
    own.edge += ownEdge.edge;
    const ownNoInstance = noInstance;

    // An endpoint on the first revision, then moved to a second one: both revisions side by side.
    const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
      source_revision_config: {
        source_tarball_path: await uploadApp(service, app('two')),
        framework_config_path: 'slipway.json',
      },
    });
    const second = await waitForRevision(service, id, patched.body.latest_revision_id);
    assert.equal(second.status, 'DEPLOYED', JSON.stringify(second));
    const canary = endpointUrl(url, 'canary');
    const served = async (revisionId: string) =>
      eventually(`canary serves ${revisionId}`, async () => {
        const got = await service.api('GET', `/v2/deployments/${id}/endpoints/canary`);
        return got.body.served_revision_id === revisionId;
      });
    assert.equal(
      (await service.api('PUT', `/v2/deployments/${id}/endpoints/canary`, { revision_id: first.id })).status,
      201,
    );
    await served(first.id);
    const onFirst = fresh();
    await send(service, canary, ['/', '/', '/missing'], onFirst);
    assert.equal(
      (await service.api('PUT', `/v2/deployments/${id}/endpoints/canary`, { revision_id: second.id })).status,
      200,
    );
    await served(second.id);
    const onSecond = fresh();
    await send(service, canary, ['/', '/boom', '/boom', '/', '/'], onSecond);
    await service.worker!.sampleUsage();

    type Series = { endpoint: string | null; revision_id: string | null; total: any; points: any[] };
    let body: { series: Series[]; measured: boolean } = { series: [], measured: false };
    const total = (endpoint: string | null, filter: (s: Series) => boolean = () => true) => {
      const of = body.series.filter((s) => s.endpoint === endpoint && filter(s));
      const sum = (f: (s: Series) => number) => of.reduce((n, s) => n + f(s), 0);
      return {
        requests: sum((s) => s.total.requests),
        '4xx': sum((s) => s.total.errors['4xx']),
        '5xx': sum((s) => s.total.errors['5xx']),
        edge: sum((s) => s.total.errors.edge),
      };
    };
    const ofRevision = (revisionId: string) => (s: Series) => s.revision_id === revisionId;
    // HAProxy's log lines arrive a moment after the answers.
    await eventually(
      'the series count every request',
      async () => {
        const got = await service.api('GET', `/v2/deployments/${id}/metrics?window=15m&step=10s`);
        assert.equal(got.status, 200, JSON.stringify(got.body));
        body = got.body;
        return (
          total(null).requests >= own.requests - hangups &&
          total('canary', ofRevision(second.id)).requests >= onSecond.requests
        );
      },
      {
        seconds: 30,
        describe: () =>
          JSON.stringify({
            own,
            hangups,
            noInstance,
            series: body.series.map((s) => [s.endpoint, s.revision_id, s.total]),
          }),
      },
    );
    assert.equal(body.measured, true);
    // The health checks of the supervisor do not go through the edge: the counts are the client's own.
    // A request cut before it reached the edge (the client reused a connection the edge was closing) is
    // in no count; one cut by the edge is an edge answer.
    const ownTotal = total(null);
    assert.deepEqual({ ...ownTotal, edge: 0, requests: 0 }, { ...own, edge: 0, requests: 0 });
    assert.ok(ownTotal.requests >= own.requests - hangups && ownTotal.requests <= own.requests);
    assert.ok(
      ownTotal.edge >= own.edge && ownTotal.edge <= own.edge + hangups,
      JSON.stringify({ ownTotal, own, hangups }),
    );
    assert.deepEqual(total('canary', ofRevision(first.id)), onFirst);
    assert.deepEqual(total('canary', ofRevision(second.id)), onSecond);
    // The edge's answers with no instance to send to belong to no revision; the others (an instance that
    // did not answer) and the app's answers to the revision of the instance.
    const withoutRevision = total(null, (s) => s.revision_id === null).requests;
    assert.ok(withoutRevision >= ownNoInstance && withoutRevision <= ownNoInstance + hangups);
    assert.equal(total(null, ofRevision(first.id)).requests, ownTotal.requests - withoutRevision);

    const ownSeries = body.series.find((s) => s.endpoint === null && s.revision_id === first.id)!;
    const latency = ownSeries.total.latency_seconds;
    assert.ok(latency.p50 !== null && latency.p99 !== null, JSON.stringify(latency));
    assert.ok(latency.p99 > latency.p50, JSON.stringify(latency));
    assert.ok(latency.p90 <= latency.p99 && latency.p50 <= latency.p90, JSON.stringify(latency));
    // The slow route waits 400 ms: the 99th percentile is at least that (the histogram's bucket starts at 0.4 s).
    assert.ok(latency.p99 >= 0.3, JSON.stringify(latency));
    assert.equal(ownSeries.points.length, 90);

    // CPU and memory per revision from the cgroups, where the service may make them.
    const usage = body.series.find((s) => s.endpoint === 'canary' && s.revision_id === second.id)!;
    const memory = usage.points.map((p) => p.memory_bytes).filter((m) => m !== null);
    if (/resources: no resource limits/.test(service.worker?.isolation ?? '')) assert.deepEqual(memory, []);
    else assert.ok(memory.length > 0 && memory.every((m) => m > 1024 * 1024), JSON.stringify(memory));
  } finally {
    await service.close();
  }
}

test('series per endpoint and revision through HAProxy', () => scenario('haproxy'));
test('series per endpoint and revision through the built-in edge', () => scenario('builtin'));
