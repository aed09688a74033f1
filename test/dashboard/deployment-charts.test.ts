/**
 * The charts of a deployment's page in Chromium, after real traffic through the app edge: per route and
 * revision, with the numbers the API serves; an endpoint moved to a second revision shows both side by
 * side. The screenshot of the panel is docs/dashboard-charts.png (docs/dashboard.md).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { ADMIN_KEY } from '../support/harness.ts';
import {
  oneFileApp,
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { SCREENSHOT_DIR, ensureDashboardBuilt, launchChromium, openPage } from './browser.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SERVER = `
import http from 'node:http';
http.createServer((req, res) => {
  if (req.url === '/slow') { setTimeout(() => { res.writeHead(200); res.end('slow'); }, 300); return; }
  if (req.url === '/missing') { res.writeHead(404); res.end('no'); return; }
  if (req.url === '/boom') { res.writeHead(500); res.end('boom'); return; }
  res.writeHead(200); res.end(process.env.VERSION);
}).listen(Number(process.env.PORT), process.env.HOST);
`;
const app = (version: string) =>
  oneFileApp(SERVER, { health_check_path: '/', database: false, env: { VERSION: version } });

let service: TestService;
let browser: Browser;
let page: Page;

before(async () => {
  await ensureDashboardBuilt();
  service = await startTestService();
  browser = await launchChromium();
  page = await openPage(browser);
});
after(async () => {
  await browser?.close();
  await service?.close();
});

async function deploy(id: string | null, version: string): Promise<{ id: string; revisionId: string }> {
  const config = {
    source_tarball_path: await uploadApp(service, app(version)),
    framework_config_path: 'slipway.json',
  };
  const made =
    id === null
      ? await service.api('POST', '/v2/deployments', {
          name: 'charted-agent',
          source: 'internal_source',
          source_revision_config: config,
        })
      : await service.api('PATCH', `/v2/deployments/${id}`, { source_revision_config: config });
  assert.ok(made.status === 201 || made.status === 200, JSON.stringify(made.body));
  const revision = await waitForRevision(service, made.body.id, made.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  return { id: made.body.id, revisionId: revision.id };
}

test("a deployment's page charts its traffic per revision, two revisions of an endpoint side by side", async () => {
  const first = await deploy(null, 'one');
  const id = first.id;
  const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  const parsed = new URL(url);
  const [slug, ...rest] = parsed.hostname.split('.');
  const canary = `${parsed.protocol}//${slug}--canary.${rest.join('.')}:${parsed.port}`;
  const served = (revisionId: string) =>
    eventually(`canary serves ${revisionId}`, async () => {
      const got = await service.api('GET', `/v2/deployments/${id}/endpoints/canary`);
      return got.body.served_revision_id === revisionId;
    });
  const send = async (target: string, paths: string[]) => {
    for (const p of paths) await requestApp(service, target, p);
  };

  await send(url, [...Array<string>(20).fill('/'), '/slow', '/missing', '/boom']);
  await service.api('PUT', `/v2/deployments/${id}/endpoints/canary`, { revision_id: first.revisionId });
  await served(first.revisionId);
  await send(canary, [...Array<string>(12).fill('/'), '/slow', '/missing']);
  const second = await deploy(id, 'two');
  await service.api('PUT', `/v2/deployments/${id}/endpoints/canary`, { revision_id: second.revisionId });
  await served(second.revisionId);
  await send(canary, [...Array<string>(8).fill('/'), '/slow', '/boom', '/boom']);
  await service.worker!.sampleUsage();

  // What the API serves once every request is in (HAProxy's log lines come a moment after the answers).
  let series: { endpoint: string | null; revision_id: string | null; total: { requests: number } }[] = [];
  await eventually('the series hold every request', async () => {
    series = (await service.api('GET', `/v2/deployments/${id}/metrics?window=15m`)).body.series;
    const at = (endpoint: string | null, revisionId: string) =>
      series.find((s) => s.endpoint === endpoint && s.revision_id === revisionId)?.total.requests ?? 0;
    return (
      at(null, first.revisionId) >= 23 && at('canary', first.revisionId) >= 14 && at('canary', second.revisionId) >= 11
    );
  });

  await page.goto(`${service.base}/`);
  await page.getByLabel('API key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  await page.goto(`${service.base}/deployments/${id}`);
  await page.getByRole('heading', { name: 'Traffic and resources' }).waitFor();
  const canaryRoute = page.locator('.chart-route[data-endpoint="canary"]');
  await canaryRoute.locator('.chart-column').nth(1).waitFor();

  // Side by side: one column per revision of the endpoint, with the API's numbers.
  const columns = canaryRoute.locator('.chart-column');
  assert.equal(await columns.count(), 2);
  for (const revisionId of [first.revisionId, second.revisionId]) {
    const column = canaryRoute.locator(`.chart-column[data-revision="${revisionId}"]`);
    const expected = series.find((s) => s.endpoint === 'canary' && s.revision_id === revisionId)!;
    assert.equal(await column.getAttribute('data-requests'), String(expected.total.requests));
    assert.equal(
      await column.locator('[data-chart="requests"] [data-summary]').innerText(),
      expected.total.requests.toLocaleString('en'),
    );
    // Drawn: a line over the steps with requests.
    assert.ok((await column.locator('[data-chart="requests"] polyline').count()) > 0);
  }
  const secondErrors = await canaryRoute
    .locator(`.chart-column[data-revision="${second.revisionId}"] [data-chart="errors"] [data-summary]`)
    .innerText();
  assert.match(secondErrors, /^2 \(4xx 0, 5xx 2, edge 0\)$/);
  // Latency p50 / p99 of the stable URL: the slow request puts p99 above p50.
  const ownLatency = await page
    .locator(
      `.chart-route[data-endpoint=""] .chart-column[data-revision="${first.revisionId}"] [data-chart="latency"] [data-summary]`,
    )
    .innerText();
  const [p50, p99] = ownLatency.split(' / ').map((text) => {
    const [value, unit] = text.split(' ');
    return Number(value) * (unit === 'ms' ? 0.001 : 1);
  });
  assert.ok(p99! > p50!, ownLatency);

  const panel = page.locator('section.panel', { has: page.getByRole('heading', { name: 'Traffic and resources' }) });
  // docs/dashboard.md's picture is rewritten only when asked (SLIPWAY_DOCS_SCREENSHOTS=1): a test run
  // must leave the checkout as it found it.
  const docs = process.env.SLIPWAY_DOCS_SCREENSHOTS === '1';
  await panel.screenshot({
    path: docs ? path.resolve('docs', 'dashboard-charts.png') : path.join(SCREENSHOT_DIR, 'deployment-charts.png'),
  });
});
