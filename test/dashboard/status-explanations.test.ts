/**
 * The dashboard says why a deployment has its status, beside the badge, in the CLI's words
 * (packages/sdk/src/deployment-status.ts): a deployment whose only revision failed to build, or that waits
 * for its listener, is "awaiting database" by the interface's values, which alone reads as wrong. And
 * the Redeploy confirmation says what comes back and that the instance count is kept (a rollback keeps
 * the deployment's scale, docs/lifecycle.md). In Chromium against a real service.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { ADMIN_KEY } from '../support/harness.ts';
import { startTestService, uploadApp, waitForRevision, type TestService } from '../dataplane/data-plane-harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage, screenshots } from './browser.ts';
import { test } from '../support/limited-test.ts';

const PAGE_DEADLINE_MS = 30_000;
/** A build that fails on its app config ends at once; generous for a busy machine all the same. */
const BUILD_DEADLINE_MS = 120_000;
/** How the build's failure message begins (it goes on to quote the value). */
const FAILURE = 'slipway.json: database must be true or false';

/** Text that begins with `prefix`, as written. */
const beginning = (prefix: string) => new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`);

describe('dashboard status explanations', () => {
  let service: TestService;
  let browser: Browser;
  let page: Page;
  let failedId: string;
  let failedRevision: string;
  let listenerDeploymentId: string;

  before(async () => {
    await ensureDashboardBuilt();
    service = await startTestService();
    // An app config the build refuses: the only revision ends BUILD_FAILED (invalid_app_config).
    const tarball = await uploadApp(service, { 'slipway.json': '{"database": "yes"}', 'main.py': '' });
    const failed = await service.api('POST', '/v2/deployments', {
      name: 'never-built',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    });
    assert.equal(failed.status, 201, JSON.stringify(failed.body));
    failedId = failed.body.id;
    failedRevision = failed.body.latest_revision_id;
    const revision = await waitForRevision(service, failedId, failedRevision, undefined, BUILD_DEADLINE_MS);
    assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));

    // A listener whose agent never called in, and an image deployment on its cluster.
    const listener = await service.api('POST', '/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'prod-eu-1',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    assert.equal(listener.status, 201, JSON.stringify(listener.body));
    const onCluster = await service.api('POST', '/v2/deployments', {
      name: 'on-cluster',
      source: 'external_container',
      source_config: { listener_id: listener.body.id },
      source_revision_config: { image_uri: 'registry.example.com/agent:1.4' },
    });
    assert.equal(onCluster.status, 201, JSON.stringify(onCluster.body));
    listenerDeploymentId = onCluster.body.id;

    browser = await launchChromium();
    page = await openPage(browser);
    page.setDefaultTimeout(PAGE_DEADLINE_MS);
    await page.goto(`${service.base}/`);
    await page.getByLabel('API key').fill(ADMIN_KEY);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  });

  after(async () => {
    await browser?.close();
    await service?.close();
  });

  /** The status cell of a deployment's row in the list (the first cell after its name). */
  const statusInList = (name: string) =>
    page
      .getByRole('row')
      .filter({ has: page.getByRole('rowheader', { name, exact: true }) })
      .getByRole('cell')
      .first();
  /** The status beside a deployment page's title. */
  const statusOnPage = () => page.getByRole('group', { name: 'Status' });

  test('a deployment whose only revision failed to build shows the failure beside its status', async () => {
    const why = `latest revision ${failedRevision.slice(0, 8)} BUILD_FAILED (invalid_app_config): ${FAILURE}`;

    await page.goto(`${service.base}/deployments`);
    const cell = statusInList('never-built');
    await cell.getByText(beginning(why)).waitFor();
    assert.equal(await cell.getByText('awaiting database', { exact: true }).isVisible(), true);

    await page.getByRole('link', { name: 'never-built', exact: true }).click();
    await page.getByRole('heading', { name: 'never-built' }).waitFor();
    const status = statusOnPage();
    await status.getByText(beginning(why)).waitFor();
    assert.equal(await status.getByText('awaiting database', { exact: true }).isVisible(), true);
    await screenshots(page, 'deployment-status-failed-build');
  });

  test('a deployment on a listener says which listener it waits for, and that its agent never called in', async () => {
    const why = 'waiting for listener prod-eu-1, whose agent has never called in';

    await page.goto(`${service.base}/deployments`);
    const cell = statusInList('on-cluster');
    await cell.getByText(why, { exact: true }).waitFor();
    assert.equal(await cell.getByText('awaiting database', { exact: true }).isVisible(), true);
    await screenshots(page, 'deployments-status-why');

    await page.getByRole('link', { name: 'on-cluster', exact: true }).click();
    await page.getByRole('heading', { name: 'on-cluster' }).waitFor();
    assert.equal(new URL(page.url()).pathname, `/deployments/${listenerDeploymentId}`);
    await statusOnPage().getByText(why, { exact: true }).waitFor();
  });

  test('Redeploy asks first, saying what comes back and that the instance count is kept', async () => {
    const scaled = await service.api('PATCH', `/v2/deployments/${failedId}`, {
      source_config: { resource_spec: { min_scale: 2 } },
    });
    assert.equal(scaled.status, 200, JSON.stringify(scaled.body));

    await page.goto(`${service.base}/deployments/${failedId}`);
    const instances = page.locator('dt', { hasText: 'Instances' }).locator('xpath=following-sibling::dd');
    await instances.getByText('2 web', { exact: true }).waitFor();

    const short = failedRevision.slice(0, 8);
    // The page answers the confirmation yes (openPage); here it is read as the user reads it.
    const [dialog] = await Promise.all([
      page.waitForEvent('dialog'),
      page.getByRole('button', { name: `Redeploy revision ${short}` }).click(),
    ]);
    assert.equal(dialog.type(), 'confirm');
    const restored = 'Restored from it: the source, secrets, install and build commands, cpu and memory.';
    const kept = 'Kept: the instance count (2 web).';
    assert.match(
      dialog.message(),
      new RegExp(`^Redeploy revision ${short}\\? A new revision is made from what it ran\\.`),
    );
    assert.ok(dialog.message().includes(restored), dialog.message());
    assert.ok(dialog.message().includes(kept), dialog.message());

    // Done: the page says the same, still shows two web instances, and explains the new revision's failure.
    const notice = page.getByRole('status').filter({ hasText: /^Redeploying revision / });
    await notice.waitFor();
    const said = await notice.innerText();
    assert.ok(said.includes(restored) && said.includes(kept), said);
    const redeployed = (await service.api('GET', `/v2/deployments/${failedId}`)).body;
    assert.notEqual(redeployed.latest_revision_id, failedRevision);
    assert.ok(
      said.startsWith(`Redeploying revision ${short} as revision ${redeployed.latest_revision_id.slice(0, 8)}.`),
      said,
    );
    await statusOnPage()
      .getByText(
        beginning(
          `latest revision ${redeployed.latest_revision_id.slice(0, 8)} BUILD_FAILED (invalid_app_config): ${FAILURE}`,
        ),
      )
      .waitFor({ timeout: BUILD_DEADLINE_MS });
    assert.equal(await instances.innerText(), '2 web');
    await screenshots(page, 'deployment-redeployed-scale-kept');
  });
});
