/**
 * The automatic rollback of a traffic split end to end (docs/app-urls.md, "Automatic rollback"): two
 * revisions built and served by the real worker behind the default edge (HAProxy where it is installed,
 * whose request log feeds the series per revision), a split to a revision that answers 5xx, and the
 * rollback monitor running on its timer as the service runs it. The split is taken back by itself: the
 * user sees `deployment.endpoint_split_rolled_back` among the deployment's events, the endpoint without a
 * split, and every request at the endpoint's URL answered by the endpoint's own revision again.
 */
import assert from 'node:assert/strict';
import { createLogger } from '../../src/logger.ts';
import { createSplitService } from '../../src/service/endpoint-splits.ts';
import { createSplitRollbackMonitor } from '../../src/service/split-rollback-monitor.ts';
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

/** Revision `broken` answers every request but its health check with a 500. */
const SERVER = `
import http from 'node:http';
http.createServer((req, res) => {
  if (req.url === '/healthz') { res.writeHead(200); res.end('ok'); return; }
  res.writeHead(process.env.VERSION === 'broken' ? 500 : 200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ revision_id: process.env.SLIPWAY_REVISION_ID }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

const app = (version: string) =>
  oneFileApp(SERVER, { health_check_path: '/healthz', database: false, env: { VERSION: version } });

const endpointUrl = (url: string, name: string) => {
  const parsed = new URL(url);
  const [slug, ...rest] = parsed.hostname.split('.');
  return `${parsed.protocol}//${slug}--${name}.${rest.join('.')}:${parsed.port}`;
};

let service: TestService;

/** The revision that answered, or the status when it was not a 200. */
async function answeredBy(url: string): Promise<string> {
  const answer = await requestApp(service, url, '/');
  return answer.status === 200 ? (JSON.parse(answer.body) as { revision_id: string }).revision_id : `${answer.status}`;
}

const endpointOf = async (id: string) =>
  (await service.api('GET', `/v2/deployments/${id}/endpoints/production`)).body as {
    served_revision_id: string | null;
    split: { revision_id: string; served: boolean } | null;
  };

async function deployed(id: string, revisionId: string) {
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  return revision.id as string;
}

// The default edge: HAProxy where it is installed (the built-in edge's rollback is test/service/split-rollback.test.ts).
test('a split whose revision answers 5xx is taken back by itself through the default edge', async () => {
  service = await startTestService();
  const monitor = createSplitRollbackMonitor({
    db: service.database.db,
    splits: createSplitService({ db: service.database.db, resources: null }),
    traffic: () => service.edge.traffic,
    logger: createLogger('silent'),
  });
  try {
    const created = await service.api('POST', '/v2/deployments', {
      name: 'rollback',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: await uploadApp(service, app('good')),
        framework_config_path: 'slipway.json',
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const a = await deployed(id, created.body.latest_revision_id);
    const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
      source_revision_config: {
        source_tarball_path: await uploadApp(service, app('broken')),
        framework_config_path: 'slipway.json',
      },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const b = await deployed(id, patched.body.latest_revision_id);
    const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
    const production = endpointUrl(url, 'production');

    const put = await service.api('PUT', `/v2/deployments/${id}/endpoints/production`, { revision_id: a });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    await eventually('production to serve A', async () => (await endpointOf(id)).served_revision_id === a);
    const split = await service.api('PUT', `/v2/deployments/${id}/endpoints/production/split`, {
      revision_id: b,
      weight: 50,
      rollback: { window_seconds: 60, min_requests: 20 },
    });
    assert.equal(split.status, 200, JSON.stringify(split.body));
    await eventually('the split to B to be served', async () => (await endpointOf(id)).split?.served === true);

    // As the service runs it: on its own timer (a shorter one than the service's), nothing in the test calls it.
    monitor.start(500);
    const seen = new Set<string>();
    const event = await eventually('the split to be taken back by itself', async () => {
      // Clients without a cookie: about half of them reach B, which answers 500.
      for (let i = 0; i < 10; i++) seen.add(await answeredBy(production));
      const events = await service.api('GET', `/v2/deployments/${id}/events?limit=100`);
      return (events.body.resources as { type: string; data: Record<string, unknown> }[]).find(
        (e) => e.type === 'deployment.endpoint_split_rolled_back',
      );
    });
    assert.ok(seen.has('500'), 'clients reached the broken revision before the rollback');
    assert.equal(event.data.split_revision_id, b);
    assert.equal(event.data.reason, 'error_rate');
    assert.match(String(event.data.message), /5xx rate 100\.0% over \d+ requests/);
    assert.equal((await endpointOf(id)).split, null);
    // The worker ends the split at the edge: every client is answered by A again.
    await eventually('A to answer every request once the split is taken back', async () => {
      for (let i = 0; i < 20; i++) if ((await answeredBy(production)) !== a) return false;
      return true;
    });
    assert.equal((await endpointOf(id)).served_revision_id, a);
  } finally {
    await monitor.stop();
    await service.close();
  }
});
