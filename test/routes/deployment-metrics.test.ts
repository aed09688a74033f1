/**
 * GET /v2/deployments/{id}/metrics through the API: another workspace's key learns nothing (404, the same
 * answer as an id that does not exist), a window or step out of bounds is 400, and the series of a
 * deployment are its own routes' only. The traffic itself, through both real edges, is in
 * test/dataplane/deployment-series.test.ts.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { client, createTestApp, newWorkspace, newWorkspaceAdmin, type TestApp } from '../support/harness.ts';

const METRICS_TOKEN = 'slwm_scraper-token-0123456789';
let t: TestApp;
let api: ReturnType<typeof client>;
let theirs: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp(
    { SLIPWAY_EDGE_PROXY: 'builtin', SLIPWAY_METRICS_TOKEN: METRICS_TOKEN },
    {
      edge: true,
      // As main.ts gives them to /metrics (no worker here: the routes' deployments are not named).
      apps: async () => ({ edge: new Map(), runtime: [], traffic: t.edge!.traffic.totals(), requestLog: null }),
    },
  );
  api = client(t.app);
  const other = await newWorkspace(t, 'other-team');
  // A workspace key of the other workspace: what a member of another team holds.
  theirs = (await newWorkspaceAdmin(t, other.id, 'their-key')).api;
});
after(() => t.close());

async function deployment(name: string, as = api): Promise<{ id: string; slug: string; revisionId: string }> {
  const made = await as.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: `registry.example.com/${name}:1` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const row = await t.database.db
    .selectFrom('deployments')
    .select('app_slug')
    .where('id', '=', made.body.id)
    .executeTakeFirstOrThrow();
  return { id: made.body.id, slug: row.app_slug, revisionId: made.body.latest_revision_id };
}

const record = (label: string, revisionId: string | null, status: number) =>
  t.edge!.traffic.record({ label, revisionId, status, seconds: 0.01, edgeAnswer: status === 503 });

test("another workspace's key gets 404 and nothing of the series", async () => {
  const mine = await deployment('measured-shop');
  record(mine.slug, mine.revisionId, 200);
  record(mine.slug, mine.revisionId, 500);
  const asThem = await theirs.get(`/v2/deployments/${mine.id}/metrics`);
  const unknownId = randomUUID();
  const unknown = await theirs.get(`/v2/deployments/${unknownId}/metrics`);
  assert.equal(asThem.status, 404);
  assert.equal(unknown.status, 404);
  // The same answer as for an id that does not exist, but for the id it names.
  assert.deepEqual(
    { ...asThem.body, detail: asThem.body.detail.replace(mine.id, '<id>') },
    { ...unknown.body, detail: unknown.body.detail.replace(unknownId, '<id>') },
  );
  assert.doesNotMatch(JSON.stringify(asThem.body), /series|requests/);

  const mineSeen = await api.get(`/v2/deployments/${mine.id}/metrics?window=1m&step=10s`);
  assert.equal(mineSeen.status, 200, JSON.stringify(mineSeen.body));
  assert.equal(mineSeen.body.measured, true);
  assert.equal(mineSeen.body.series.length, 1);
  assert.equal(mineSeen.body.series[0].revision_id, mine.revisionId);
  assert.equal(mineSeen.body.series[0].endpoint, null);
  assert.equal(mineSeen.body.series[0].points.length, 6);
  assert.deepEqual(mineSeen.body.series[0].total.errors, { '4xx': 0, '5xx': 1, edge: 0 });
});

test("a deployment's series are its own routes' only, its endpoints' included", async () => {
  const one = await deployment('first-shop');
  const two = await deployment('second-shop');
  record(one.slug, one.revisionId, 200);
  record(two.slug, two.revisionId, 200);
  // An endpoint's label of the other deployment, and a label that is no route of it.
  record(`${two.slug}--canary`, two.revisionId, 200);
  record(`${one.slug}--canary`, one.revisionId, 404);
  // Marked DEPLOYED as the data plane would, so that an endpoint may be pinned to it.
  await t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYED' })
    .where('deployment_id', '=', one.id)
    .execute();
  const put = await api.put(`/v2/deployments/${one.id}/endpoints/canary`, { revision_id: one.revisionId });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const seen = await api.get(`/v2/deployments/${one.id}/metrics`);
  assert.equal(seen.status, 200);
  assert.deepEqual(
    seen.body.series.map((s: { endpoint: string | null; total: { requests: number } }) => [
      s.endpoint,
      s.total.requests,
    ]),
    [
      [null, 1],
      ['canary', 1],
    ],
  );
  assert.equal(seen.body.window_seconds, 900);
});

test('a window or step out of bounds is 400 and names the parameter', async () => {
  const { id } = await deployment('bounded-shop');
  for (const query of [
    'window=2h',
    'window=30s',
    'window=abc',
    'window=65s',
    'step=5s',
    'step=15s',
    'window=1m&step=2m',
    'window=-1m',
    'step=0s',
  ]) {
    const got = await api.get(`/v2/deployments/${id}/metrics?${query}`);
    assert.equal(got.status, 400, `${query}: ${JSON.stringify(got.body)}`);
    assert.match(got.body.detail, query.startsWith('window') && !query.includes('step') ? /^window/ : /^(step|window)/);
  }
  assert.equal((await api.get(`/v2/deployments/${id}/metrics?window=1h&step=10s`)).status, 200);
  assert.equal((await api.get(`/v2/deployments/not-a-uuid/metrics`)).status, 422);
});

test('/metrics has the latency histogram and the errors by class per revision', async () => {
  const { slug, revisionId } = await deployment('scraped-shop');
  record(slug, revisionId, 200);
  record(slug, revisionId, 404);
  record(slug, null, 503);
  const scraped = await t.app.inject({
    method: 'GET',
    url: '/metrics',
    headers: { authorization: `Bearer ${METRICS_TOKEN}` },
  });
  assert.equal(scraped.statusCode, 200);
  const lines = scraped.body.split('\n');
  const line = (prefix: string, ...parts: string[]) =>
    lines.find((l) => l.startsWith(prefix) && parts.every((p) => l.includes(p)));
  const of = `app="${slug}"`;
  assert.match(
    line('slipway_app_request_duration_seconds_bucket', of, `revision="${revisionId}"`, 'le="+Inf"') ?? '',
    / 2$/,
  );
  assert.match(
    line('slipway_app_request_duration_seconds_bucket', of, `revision="${revisionId}"`, 'le="0.01"') ?? '',
    / 2$/,
  );
  assert.match(
    line('slipway_app_request_duration_seconds_bucket', of, `revision="${revisionId}"`, 'le="0.005"') ?? '',
    / 0$/,
  );
  assert.match(line('slipway_app_request_duration_seconds_count', of, `revision="${revisionId}"`) ?? '', / 2$/);
  assert.match(line('slipway_app_request_errors_total', of, `revision="${revisionId}"`, 'class="4xx"') ?? '', / 1$/);
  assert.match(line('slipway_app_request_errors_total', of, 'revision=""', 'class="edge"') ?? '', / 1$/);
});
