/**
 * A traffic split through the real worker (docs/app-urls.md, "Traffic split"): an endpoint on revision A
 * splits half its clients to revision B, started from B's sealed build (no new revision, no build); each
 * sticky client stays on one revision and both revisions get clients; promoting B makes it serve every
 * request and ends the split; a split taken back leaves the endpoint's revision serving every request.
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
  res.end(JSON.stringify({ revision_id: process.env.SLIPWAY_REVISION_ID }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

const app = (version: string) =>
  oneFileApp(SERVER, { health_check_path: '/healthz', database: false, env: { VERSION: version } });

/** Distinct clients, each naming itself in X-Slipway-Sticky. */
const CLIENTS = Array.from({ length: 24 }, (_, i) => `client-${i}`);
/** Requests each client sends; a sticky client answers from one revision every time. */
const ROUNDS = 3;

let service: TestService;

const endpointUrl = (url: string, name: string) => {
  const parsed = new URL(url);
  const [slug, ...rest] = parsed.hostname.split('.');
  return `${parsed.protocol}//${slug}--${name}.${rest.join('.')}:${parsed.port}`;
};

/** The revision that answered, or the status when it was not a 200. */
async function answeredBy(url: string, headers: Record<string, string> = {}): Promise<string> {
  const answer = await requestApp(service, url, '/', { headers });
  return answer.status === 200 ? (JSON.parse(answer.body) as { revision_id: string }).revision_id : `${answer.status}`;
}

/** Each client's revisions over ROUNDS requests. */
async function clientsOn(url: string): Promise<Map<string, Set<string>>> {
  const seen = new Map<string, Set<string>>();
  for (const client of CLIENTS) {
    const revisions = new Set<string>();
    for (let round = 0; round < ROUNDS; round++) revisions.add(await answeredBy(url, { 'x-slipway-sticky': client }));
    seen.set(client, revisions);
  }
  return seen;
}

/** True when every one of `count` requests without a client id answers `revisionId`. */
async function allAnswer(url: string, revisionId: string, count = 20): Promise<boolean> {
  for (let i = 0; i < count; i++) if ((await answeredBy(url)) !== revisionId) return false;
  return true;
}

const endpointOf = async (id: string) =>
  (await service.api('GET', `/v2/deployments/${id}/endpoints/production`)).body as {
    revision_id: string;
    served_revision_id: string | null;
    split: { revision_id: string; weight: number; served: boolean } | null;
  };

/** The deployment's revisions and revision events, to see that the split built or created nothing. */
async function revisionsAndEvents(id: string): Promise<{ revisions: string[]; events: number }> {
  const revisions = await service.api('GET', `/v2/deployments/${id}/revisions?limit=100`);
  const events = await service.api('GET', `/v2/deployments/${id}/events?limit=100`);
  return {
    revisions: (revisions.body.resources as { id: string }[]).map((r) => r.id).sort(),
    events: (events.body.resources as { type: string }[]).filter((e) => e.type.startsWith('revision.')).length,
  };
}

// Both edges: HAProxy where it is installed (auto), and the built-in one.
for (const edge of ['auto', 'builtin'] as const) {
  test(`a split through the worker sends sticky clients to both revisions; promoting and taking it back end it (edge ${edge})`, async () => {
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
    name: 'split',
    source: 'internal_source',
    source_revision_config: {
      source_tarball_path: await uploadApp(service, app('a')),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const a = await waitForRevision(service, id, created.body.latest_revision_id);
  assert.equal(a.status, 'DEPLOYED', JSON.stringify(a));
  const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
    source_revision_config: {
      source_tarball_path: await uploadApp(service, app('b')),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  const b = await waitForRevision(service, id, patched.body.latest_revision_id);
  assert.equal(b.status, 'DEPLOYED', JSON.stringify(b));
  const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  const production = endpointUrl(url, 'production');

  const put = await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, { revision_id: a.id });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await eventually('production to serve A', async () => (await endpointOf(id)).served_revision_id === a.id);
  assert.ok(await allAnswer(production, a.id), 'before the split, A answers every request');
  const before = await revisionsAndEvents(id);

  // Half the clients to B: once B's instances are healthy the split is served.
  const split = await service.api('PUT', `/v2/deployments/${id}/endpoints/production/split`, {
    revision_id: b.id,
    weight: 50,
  });
  assert.equal(split.status, 200, JSON.stringify(split.body));
  await eventually('the split to B to be served', async () => {
    const endpoint = await endpointOf(id);
    return endpoint.split?.revision_id === b.id && endpoint.split?.served === true && endpoint;
  });
  const seen = await clientsOn(production);
  for (const [client, revisions] of seen)
    assert.equal(revisions.size, 1, `${client} stayed on one revision: ${[...revisions].join(', ')}`);
  const sides = new Set([...seen.values()].flatMap((revisions) => [...revisions]));
  assert.deepEqual([...sides].sort(), [a.id, b.id].sort(), 'the clients reached both revisions, and only them');
  // B started from its sealed build: no revision was created and none was built or changed state.
  assert.deepEqual(await revisionsAndEvents(id), before);

  // Promote B: it serves every request and the split ends.
  const promoted = await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, { revision_id: b.id });
  assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
  assert.equal(promoted.body.split, null);
  await eventually('production to serve B alone after the promotion', async () => {
    const endpoint = await endpointOf(id);
    return endpoint.served_revision_id === b.id && endpoint.split === null && (await allAnswer(production, b.id));
  });
  for (const [client, revisions] of await clientsOn(production))
    assert.deepEqual([...revisions], [b.id], `${client} is on B after the promotion`);

  // A new split, taken back: the endpoint's revision answers every request again.
  const again = await service.api('PUT', `/v2/deployments/${id}/endpoints/production/split`, {
    revision_id: a.id,
    weight: 50,
  });
  assert.equal(again.status, 200, JSON.stringify(again.body));
  await eventually('the split to A to be served', async () => (await endpointOf(id)).split?.served === true);
  const removed = await service.api('DELETE', `/v2/deployments/${id}/endpoints/production/split`);
  assert.equal(removed.status, 204, JSON.stringify(removed.body));
  assert.equal((await endpointOf(id)).split, null);
  await eventually('B to answer every request once the split is taken back', async () => {
    if (!(await allAnswer(production, b.id))) return false;
    const clients = await clientsOn(production);
    return [...clients.values()].every((revisions) => revisions.size === 1 && revisions.has(b.id));
  });
  assert.deepEqual(await revisionsAndEvents(id), before);
}
