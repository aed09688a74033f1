/**
 * A deployment's endpoints in the dashboard, in Chromium against the real service and data plane: an
 * endpoint with its revision, a traffic split started, widened, promoted and taken back from the page,
 * each checked against what the API then answers, and the split serving at the endpoint's URL.
 */
import assert from 'node:assert/strict';
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
import { ensureDashboardBuilt, launchChromium, openPage, screenshots } from './browser.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SERVER = `
import http from 'node:http';
http.createServer((req, res) => { res.writeHead(200); res.end(process.env.VERSION); })
  .listen(Number(process.env.PORT), process.env.HOST);
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
  const config = { source_tarball_path: await uploadApp(service, app(version)), framework_config_path: 'slipway.json' };
  const made =
    id === null
      ? await service.api('POST', '/v2/deployments', {
          name: 'split-from-dashboard',
          source: 'internal_source',
          source_revision_config: config,
        })
      : await service.api('PATCH', `/v2/deployments/${id}`, { source_revision_config: config });
  assert.ok(made.status === 201 || made.status === 200, JSON.stringify(made.body));
  const revision = await waitForRevision(service, made.body.id, made.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  return { id: made.body.id, revisionId: revision.id };
}

test("a deployment's endpoints: a split started, widened, promoted and taken back from its page", async () => {
  const first = await deploy(null, 'one');
  const id = first.id;
  const second = await deploy(id, 'two');
  const endpointPath = `/v2/deployments/${id}/endpoints/production`;
  assert.equal((await service.api('PUT', endpointPath, { revision_id: first.revisionId })).status, 201);
  const endpoint = async () => (await service.api('GET', endpointPath)).body;

  await page.goto(`${service.base}/`);
  await page.getByLabel('API key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  await page.goto(`${service.base}/deployments/${id}`);
  const card = page.getByRole('article', { name: 'Endpoint production' });
  await card.waitFor();
  // The panel reads the endpoint again while its first revision starts.
  await card.locator('[data-serving]', { hasText: 'serving' }).waitFor();
  assert.match(await card.innerText(), new RegExp(first.revisionId.slice(0, 8)));

  // A split to the second revision at 30%, without automatic rollback.
  const newSplit = card.getByRole('form', { name: 'New split of production' });
  await newSplit.getByLabel('Revision').selectOption(second.revisionId);
  await newSplit.getByLabel('Weight (%)').fill('30');
  await newSplit.getByLabel('Take it back by itself if it does worse').uncheck();
  await newSplit.getByRole('button', { name: 'Start split' }).click();
  await page.getByRole('status').filter({ hasText: 'sends 30% of its clients' }).waitFor();
  let now = await endpoint();
  assert.deepEqual([now.split?.revision_id, now.split?.weight, now.split?.rollback], [second.revisionId, 30, null]);
  await card.locator('[data-split]', { hasText: '30% to' }).filter({ hasText: 'serving' }).waitFor();
  // Serving: clients that say who they are reach both revisions at the endpoint's URL.
  const answers = new Set<string>();
  await eventually('both revisions answer at the endpoint', async () => {
    for (let client = 0; client < 20; client++)
      answers.add((await requestApp(service, now.url, '/', { headers: { 'x-slipway-sticky': `c${client}` } })).body);
    return answers.has('one') && answers.has('two');
  });

  // Widened to 60%: the same revision, the new weight.
  const split = card.getByRole('form', { name: 'Split of production' });
  await split.getByLabel('Weight (%)').fill('60');
  await split.getByRole('button', { name: 'Change weight' }).click();
  await page.getByRole('status').filter({ hasText: 'now sends 60%' }).waitFor();
  now = await endpoint();
  assert.deepEqual([now.split?.revision_id, now.split?.weight], [second.revisionId, 60]);

  // Promoted: the endpoint moves to the second revision and the split ends.
  await split.getByRole('button', { name: `Promote ${second.revisionId.slice(0, 8)}` }).click();
  await page.getByRole('status').filter({ hasText: 'the split ends' }).waitFor();
  now = await endpoint();
  assert.deepEqual([now.revision_id, now.split], [second.revisionId, null]);
  await eventually('the endpoint serves the second revision', async () => {
    const answer = await requestApp(service, now.url, '/');
    return answer.body === 'two';
  });

  // A split back to the first revision, then taken back from the page.
  await card.locator('[data-serving]', { hasText: 'serving' }).waitFor();
  await newSplit.getByLabel('Revision').selectOption(first.revisionId);
  await newSplit.getByLabel('Weight (%)').fill('10');
  await newSplit.getByRole('button', { name: 'Start split' }).click();
  await page.getByRole('status').filter({ hasText: 'sends 10% of its clients' }).waitFor();
  now = await endpoint();
  assert.deepEqual([now.split?.revision_id, now.split?.rollback?.window_seconds], [first.revisionId, 300]);
  await screenshots(page, 'deployment-endpoints');
  await split.getByRole('button', { name: 'End split' }).click();
  await page.getByRole('status').filter({ hasText: 'is taken back' }).waitFor();
  assert.equal((await endpoint()).split, null);
  await card.locator('[data-split]', { hasText: 'none' }).waitFor();
});
