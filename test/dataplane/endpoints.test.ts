/**
 * Endpoints on the own data plane, end to end (docs/app-urls.md, "Endpoints"): each endpoint's revision
 * runs as instances of its own at `<slug>--<name>`, a promotion moves production to staging's revision
 * without a failed request under a steady stream of requests, a restart of the service brings the
 * endpoints back, and deleting an endpoint or the deployment stops them.
 */
import assert from 'node:assert/strict';
import {
  oneFileApp,
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SERVER = `
import http from 'node:http';
http.createServer((req, res) => {
  if (req.url === '/healthz') { res.writeHead(200); res.end('ok'); return; }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ version: process.env.VERSION, revision_id: process.env.SLIPWAY_REVISION_ID }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

const app = (version: string) =>
  oneFileApp(SERVER, { health_check_path: '/healthz', database: false, env: { VERSION: version } });

let service: TestService;

const endpointUrl = (url: string, name: string) => {
  const parsed = new URL(url);
  const [slug, ...rest] = parsed.hostname.split('.');
  return `${parsed.protocol}//${slug}--${name}.${rest.join('.')}:${parsed.port}`;
};

async function versionAt(url: string): Promise<{ status: number; version?: string; revision_id?: string }> {
  const answer = await requestApp(service, url, '/');
  return answer.status === 200 ? { status: 200, ...JSON.parse(answer.body) } : { status: answer.status };
}

async function servedAt(deploymentId: string, name: string, revisionId: string) {
  return eventually(`endpoint ${name} to serve ${revisionId}`, async () => {
    const got = await service.api('GET', `/v2/deployments/${deploymentId}/endpoints/${name}`);
    return got.body.served_revision_id === revisionId && got.body;
  });
}

// Both edges: HAProxy where it is installed (auto), and the built-in one.
for (const edge of ['auto', 'builtin'] as const) {
  test(`endpoints serve their revisions, a promotion loses no request, a restart brings them back, deletes stop them (edge ${edge})`, async () => {
    service = await startTestService({ SLIPWAY_EDGE_PROXY: edge });
    try {
      await scenario();
    } finally {
      await service.close();
    }
  });
}

async function scenario(): Promise<void> {
  const created = await service.api('POST', '/v2/deployments', {
    name: 'shop',
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
  const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
    source_revision_config: {
      source_tarball_path: await uploadApp(service, app('two')),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  const second = await waitForRevision(service, id, patched.body.latest_revision_id);
  assert.equal(second.status, 'DEPLOYED', JSON.stringify(second));
  const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  const production = endpointUrl(url, 'production');
  const staging = endpointUrl(url, 'staging');

  // Before any endpoint exists, its host names no app.
  assert.equal((await versionAt(production)).status, 404);

  // Production stays on the first revision while the deployment's own URL follows the newest.
  const putProduction = await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, {
    revision_id: first.id,
  });
  assert.equal(putProduction.status, 201, JSON.stringify(putProduction.body));
  assert.equal(putProduction.body.url, production);
  const putStaging = await service.api('PUT', `/v2/deployments/${id}/endpoints/staging`, { revision_id: second.id });
  assert.equal(putStaging.status, 201);
  await servedAt(id, 'production', first.id);
  await servedAt(id, 'staging', second.id);
  assert.deepEqual(await versionAt(production), { status: 200, version: 'one', revision_id: first.id });
  assert.deepEqual(await versionAt(staging), { status: 200, version: 'two', revision_id: second.id });
  assert.deepEqual(await versionAt(url), { status: 200, version: 'two', revision_id: second.id });
  const slug = new URL(url).hostname.split('.')[0]!;
  const oldTargets = service.edge.targets(`${slug}--production`);
  assert.ok(oldTargets.length > 0);

  // Promote staging's revision to production under a steady stream of requests: none fails.
  let failures = 0;
  let served = 0;
  const seen: string[] = [];
  const versions = new Set<string>();
  let keepGoing = true;
  const load = Array.from({ length: 4 }, async () => {
    while (keepGoing) {
      const answer = await requestApp(service, production, '/').catch((error: Error) => ({
        status: 0,
        body: String(error),
      }));
      if (answer.status === 200) {
        served++;
        versions.add(JSON.parse(answer.body).version);
      } else {
        failures++;
        seen.push(`${answer.status} ${answer.body}`);
      }
    }
  });
  const promoted = await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, { revision_id: second.id });
  assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
  await servedAt(id, 'production', second.id);
  await new Promise((resolve) => setTimeout(resolve, 300));
  keepGoing = false;
  await Promise.all(load);
  assert.equal(
    failures,
    0,
    `${failures} of ${served + failures} requests failed during the promotion: ${seen.slice(0, 5).join('; ')}`,
  );
  assert.deepEqual([...versions].sort(), ['one', 'two'], 'the stream saw both revisions');
  assert.deepEqual(await versionAt(production), { status: 200, version: 'two', revision_id: second.id });
  // The old instances left the route (and were stopped): none of them is routed to any more.
  const newTargets = service.edge.targets(`${slug}--production`);
  assert.ok(newTargets.length > 0);
  assert.ok(newTargets.every((target) => !oldTargets.some((old) => old.port === target.port)));

  const events = await service.api('GET', `/v2/deployments/${id}/events?limit=100`);
  const moves = (events.body.resources as { type: string; data: Record<string, unknown> }[])
    .filter((e) => e.type.startsWith('deployment.endpoint_') && e.data.endpoint === 'production')
    .map((e) => [e.type, e.data.from_revision_id ?? null, e.data.to_revision_id ?? e.data.revision_id]);
  assert.deepEqual(moves, [
    ['deployment.endpoint_set', null, first.id],
    ['deployment.endpoint_served', null, first.id],
    ['deployment.endpoint_set', first.id, second.id],
    ['deployment.endpoint_served', first.id, second.id],
  ]);

  // A restart of the service brings the endpoints back.
  await service.stopWorker();
  assert.equal((await versionAt(production)).status, 404);
  await service.startWorker();
  await eventually(
    'production to answer again after the restart',
    async () => (await versionAt(production)).version === 'two',
  );
  await eventually(
    'staging to answer again after the restart',
    async () => (await versionAt(staging)).version === 'two',
  );

  // Deleting an endpoint stops it; the others and the deployment's own URL stay.
  assert.equal((await service.api('DELETE', `/v2/deployments/${id}/endpoints/staging`)).status, 204);
  await eventually('staging to be gone', async () => (await versionAt(staging)).status === 404);
  assert.equal(service.edge.targets(`${slug}--staging`).length, 0);
  assert.equal((await versionAt(production)).version, 'two');
  assert.equal((await versionAt(url)).version, 'two');

  // Deleting the deployment stops its endpoints.
  assert.equal((await service.api('DELETE', `/v2/deployments/${id}`)).status, 204);
  await eventually(
    'production to be gone with its deployment',
    async () => (await versionAt(production)).status === 404,
  );
  await eventually(
    'the deployment row to be gone',
    async () => (await service.api('GET', `/v2/deployments/${id}`)).status === 404,
  );
  assert.equal(service.edge.targets(`${slug}--production`).length, 0);
}

/** Healthy unless it is revision 'bad' started after /poison was called (the data directory is the deployment's). */
const FLAKY = `
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
const poison = path.join(process.env.SLIPWAY_DATA_DIR, 'poison');
const sick = process.env.VERSION === 'bad' && fs.existsSync(poison);
http.createServer((req, res) => {
  if (req.url === '/healthz') { res.writeHead(sick ? 500 : 200); res.end(); return; }
  if (req.url === '/poison') fs.writeFileSync(poison, 'x');
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ version: process.env.VERSION, revision_id: process.env.SLIPWAY_REVISION_ID }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

test('a move whose revision does not become healthy leaves the endpoint serving what it served, and says why', async () => {
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '5' });
  try {
    const flaky = (version: string) =>
      oneFileApp(FLAKY, { health_check_path: '/healthz', database: false, env: { VERSION: version } });
    const created = await service.api('POST', '/v2/deployments', {
      name: 'flaky',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: await uploadApp(service, flaky('good')),
        framework_config_path: 'slipway.json',
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const good = await waitForRevision(service, id, created.body.latest_revision_id);
    assert.equal(good.status, 'DEPLOYED', JSON.stringify(good));
    assert.equal(
      (await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, { revision_id: good.id })).status,
      201,
    );
    await servedAt(id, 'production', good.id);
    const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
      source_revision_config: {
        source_tarball_path: await uploadApp(service, flaky('bad')),
        framework_config_path: 'slipway.json',
      },
    });
    const bad = await waitForRevision(service, id, patched.body.latest_revision_id);
    assert.equal(bad.status, 'DEPLOYED', JSON.stringify(bad));
    const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
    // From now on, a new start of the bad revision fails its health check.
    assert.equal((await requestApp(service, url, '/poison')).status, 200);

    assert.equal(
      (await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, { revision_id: bad.id })).status,
      200,
    );
    const failed = await eventually('the failed start to be an event', async () => {
      const events = await service.api('GET', `/v2/deployments/${id}/events?limit=100`);
      return (events.body.resources as { type: string; data: Record<string, unknown> }[]).find(
        (e) => e.type === 'deployment.endpoint_failed' && e.data.revision_id === bad.id,
      );
    });
    assert.equal(failed.data.endpoint, 'production');
    assert.match(String(failed.data.message), /health/i);
    const production = endpointUrl(url, 'production');
    assert.deepEqual(await versionAt(production), { status: 200, version: 'good', revision_id: good.id });
    const endpoint = (await service.api('GET', `/v2/deployments/${id}/endpoints/production`)).body;
    assert.deepEqual([endpoint.revision_id, endpoint.served_revision_id], [bad.id, good.id]);
  } finally {
    await service.close();
  }
});
