/**
 * The dashboard in a real browser against a real service (HTTP, PostgreSQL, the worker building and
 * running apps): what a user does with it, start to end. The steps build on each other, so they run in
 * order on one service and one browser page.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import * as tar from 'tar';
import { ADMIN_KEY } from '../support/harness.ts';
import {
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage, screenshots } from './browser.ts';
import { test } from '../support/limited-test.ts';

/** Generous: a build and start of the example app on a busy machine. Waiting ends as soon as the state shows. */
const DEPLOY_DEADLINE_MS = 240_000;
const PAGE_DEADLINE_MS = 30_000;

describe('dashboard', () => {
  let service: TestService;
  let browser: Browser;
  let page: Page;
  let archive: string;
  let deploymentId: string;
  let firstRevisionId: string;

  before(async () => {
    await ensureDashboardBuilt();
    service = await startTestService();
    browser = await launchChromium();
    page = await openPage(browser);
    page.setDefaultTimeout(PAGE_DEADLINE_MS);
    // What a user would make of the example app: tar czf app.tar.gz -C examples/agent-app .
    archive = path.join(os.tmpdir(), `agent-app-${randomBytes(4).toString('hex')}.tar.gz`);
    await tar.c(
      { gzip: true, file: archive, cwd: 'examples/agent-app', portable: true },
      await fs.readdir('examples/agent-app'),
    );
  });

  after(async () => {
    await browser?.close();
    await service?.close();
    if (archive) await fs.rm(archive, { force: true });
  });

  const signIn = async (key: string) => {
    await page.goto(`${service.base}/`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
  };

  test("a wrong API key is refused with the service's reason, and nothing opens", async () => {
    await signIn('slw_not_a_key_of_this_service');
    const alert = page.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /Invalid API key/);
    assert.equal(await page.getByRole('heading', { name: 'Sign in to Slipway' }).isVisible(), true);
    await screenshots(page, 'sign-in-refused');
  });

  test('signed in, an uploaded app is followed to DEPLOYED and answers at its stable URL', async () => {
    await signIn(ADMIN_KEY);
    await page.getByRole('heading', { name: 'Deployments' }).waitFor();
    await page.getByText('No deployments yet').waitFor();

    await page.getByRole('link', { name: 'New deployment' }).click();
    await page.getByRole('heading', { name: 'New deployment' }).waitFor();
    await page.getByLabel('Name', { exact: true }).fill('support-agent');
    await page.getByLabel('Source archive', { exact: true }).setInputFiles(archive);
    await page.getByRole('button', { name: 'Add secret' }).click();
    await page.getByLabel('Name 1').fill('GREETING');
    await page.getByLabel('Value 1').fill('hello from the first revision');
    await screenshots(page, 'new-deployment');
    await page.getByRole('button', { name: 'Create deployment' }).click();

    await page.getByRole('heading', { name: 'support-agent' }).waitFor();
    deploymentId = new URL(page.url()).pathname.split('/')[2]!;
    const revisions = page
      .getByRole('listitem')
      .filter({ has: page.getByRole('button', { name: /^Redeploy revision/ }) });
    await revisions.first().getByText('deployed', { exact: true }).waitFor({ timeout: DEPLOY_DEADLINE_MS });
    assert.equal(await revisions.count(), 1);
    assert.equal(await revisions.first().getByText('serving').isVisible(), true);
    firstRevisionId = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.active_revision_id;

    // The page shows secret names, never values, and the stable URL, which reaches the app.
    await page
      .getByRole('list', { name: /Secret names/ })
      .getByText('GREETING')
      .waitFor();
    assert.equal(await page.getByText('hello from the first revision').count(), 0);
    const stableUrl = await page.getByRole('link', { name: /support-agent-/ }).getAttribute('href');
    assert.ok(stableUrl);
    const answer = await requestApp(service, stableUrl, '/');
    assert.equal(JSON.parse(answer.body).greeting, 'hello from the first revision');
    // How many instances run, as resource_spec asks (one web instance by default).
    assert.equal(
      (await page.locator('dt', { hasText: 'Instances' }).locator('xpath=following-sibling::dd').textContent())?.trim(),
      '1 web',
    );
    // The activity panel tells what happened, newest first.
    const activity = page.getByRole('list', { name: 'Latest events, newest first' });
    await activity.getByText(`Revision ${String(firstRevisionId).slice(0, 8)}: DEPLOYED`).waitFor();
    const items = await activity.locator('li').allTextContents();
    assert.ok(items.length > 1 && items.length <= 10, items.join(' | '));
    const deployedAt = items.findIndex((i) => i.includes(': DEPLOYED'));
    const queuedAt = items.findIndex((i) => i.includes(': QUEUED'));
    assert.ok(queuedAt === -1 || deployedAt < queuedAt, `newest first: ${items.join(' | ')}`);
    // The app is never served on the dashboard's origin, by path either (its own origin is the edge's).
    const slug = new URL(stableUrl).hostname.split('.')[0]!;
    const byPath = await fetch(`${service.base}/apps/${slug}/`, { headers: { accept: 'text/html' } });
    assert.doesNotMatch(await byPath.text(), /hello from the first revision/);
    assert.notEqual(new URL(stableUrl).port, new URL(service.base).port);
    await screenshots(page, 'deployment');

    await page.getByRole('link', { name: 'Deployments' }).click();
    await page.getByRole('link', { name: 'support-agent' }).waitFor();
    await screenshots(page, 'deployments');
  });

  test('the build log shows what ran, and the runtime log follows the serving app', async () => {
    await page.goto(`${service.base}/deployments/${deploymentId}`);
    await page.getByRole('link', { name: `Logs of revision ${firstRevisionId.slice(0, 8)}` }).click();
    await page.getByText('The log is complete.').waitFor();
    const build = page.getByRole('log', { name: 'Build log' });
    await build.getByText(/Extracting the uploaded source/).waitFor();
    await build.getByText('Build finished').waitFor();

    await page.getByRole('link', { name: 'Runtime' }).click();
    const runtime = page.getByRole('log', { name: 'Runtime log' });
    await runtime.getByText(/Health check passed/).waitFor();
    // The serving revision's app log stays open: new lines come as the app writes them.
    await page.getByText('Following live').waitFor();
    await screenshots(page, 'revision-log');
  });

  test('an older revision is redeployed from its timeline and serves again', async () => {
    // A second revision with another greeting, made the way a CI job would (through the API).
    const patched = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
      secrets: [{ name: 'GREETING', value: 'hello from the second revision' }],
    });
    assert.equal(patched.status, 200);
    await waitForRevision(service, deploymentId, patched.body.latest_revision_id, ['DEPLOYED'], DEPLOY_DEADLINE_MS);

    await page.goto(`${service.base}/deployments/${deploymentId}`);
    const revisions = page
      .getByRole('listitem')
      .filter({ has: page.getByRole('button', { name: /^Redeploy revision/ }) });
    await revisions.nth(1).waitFor();
    await page.getByRole('button', { name: `Redeploy revision ${firstRevisionId.slice(0, 8)}` }).click();

    // A third revision appears on top and is followed until it serves.
    await revisions.nth(2).waitFor();
    const newest = revisions.first();
    await newest.getByText('serving').waitFor({ timeout: DEPLOY_DEADLINE_MS });
    assert.equal(await newest.getByText('deployed', { exact: true }).isVisible(), true);
    const deployment = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body;
    const answer = await requestApp(service, deployment.source_config.custom_url, '/');
    assert.equal(JSON.parse(answer.body).greeting, 'hello from the first revision');
    await screenshots(page, 'revisions');
  });

  test('an image this service cannot run ends with the reason shown on its revision', async () => {
    await page.goto(`${service.base}/deployments/new`);
    await page.getByLabel('Name', { exact: true }).fill('image-agent');
    await page.getByLabel('Container image').check();
    await page.getByLabel('Image', { exact: true }).fill('registry.example.com/agent:1.0.0');
    await page.getByRole('button', { name: 'Create deployment' }).click();
    await page.getByRole('heading', { name: 'image-agent' }).waitFor();
    await page.getByText('container runtime unavailable').waitFor({ timeout: DEPLOY_DEADLINE_MS });
    assert.equal(await page.getByText('deploy failed', { exact: true }).isVisible(), true);

    // The list finds deployments by name and by status.
    await page.goto(`${service.base}/deployments`);
    await page.getByLabel('Name contains').fill('image');
    await page.getByRole('link', { name: 'support-agent' }).waitFor({ state: 'detached' });
    assert.equal(await page.getByRole('link', { name: 'image-agent' }).isVisible(), true);
    await page.getByLabel('Name contains').fill('');
    await page.getByLabel('Status').selectOption('READY');
    await page.getByRole('link', { name: 'support-agent' }).waitFor();
    await page.getByRole('link', { name: 'image-agent' }).waitFor({ state: 'detached' });
    assert.equal(new URL(page.url()).search, '?status=READY');
  });

  test('a running build is followed live in its log and interrupted from the timeline', async () => {
    // An app whose build never ends by itself.
    const tarball = await uploadApp(service, {
      'package.json': JSON.stringify({ name: 'slow-build', version: '1.0.0', main: 'server.js' }),
      'server.js':
        "require('node:http').createServer((q, s) => s.end('ok')).listen(process.env.PORT, process.env.HOST);",
      'slipway.json': JSON.stringify({ build: 'echo compiling the world; sleep 600' }),
    });
    const created = await service.api('POST', '/v2/deployments', {
      name: 'slow-build',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    });
    assert.equal(created.status, 201);
    const { id, latest_revision_id: revisionId } = created.body;

    await page.goto(`${service.base}/deployments/${id}/revisions/${revisionId}/logs`);
    await page
      .getByRole('log', { name: 'Build log' })
      .getByText('compiling the world', { exact: true })
      .waitFor({ timeout: DEPLOY_DEADLINE_MS });
    await page.getByText('Following live').waitFor();

    await page.getByRole('link', { name: '← slow-build' }).click();
    await page.getByRole('button', { name: `Interrupt revision ${revisionId.slice(0, 8)}` }).click();
    await page.getByText('interrupted by user').waitFor({ timeout: DEPLOY_DEADLINE_MS });
    assert.equal(await page.getByText('interrupted', { exact: true }).isVisible(), true);
    assert.equal(await page.getByRole('button', { name: /^Interrupt revision/ }).count(), 0);
  });

  test('deployments are filtered by tag, and a deployment shows its tags', async () => {
    const key = await service.api('POST', '/v2/tags/keys', { key: 'team' });
    const value = await service.api('POST', `/v2/tags/keys/${key.body.id}/values`, { value: 'support' });
    assert.equal(
      (await service.api('PUT', `/v2/deployments/${deploymentId}/tags`, { tag_value_ids: [value.body.id] })).status,
      200,
    );

    await page.goto(`${service.base}/deployments`);
    await page.getByRole('link', { name: 'image-agent' }).waitFor();
    await page.getByLabel('Tag').selectOption({ label: 'team: support' });
    await page.getByRole('link', { name: 'image-agent' }).waitFor({ state: 'detached' });
    await page.getByRole('link', { name: 'support-agent' }).click();
    await page.getByRole('heading', { name: 'support-agent' }).waitFor();
    await page.getByText('team: support').waitFor();
  });

  test('listeners, code hosts and API keys; a new key is shown once and signs in', async () => {
    const listener = await service.api('POST', '/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'prod-eu-1',
      compute_config: { k8s_namespaces: ['agents'] },
      version: '0.1.0',
    });
    assert.equal(listener.status, 201);
    await page.getByRole('link', { name: 'Listeners' }).click();
    await page
      .getByRole('row', { name: /prod-eu-1/ })
      .getByText('never seen')
      .waitFor();
    await screenshots(page, 'listeners');

    await page.getByRole('link', { name: 'Code hosts' }).click();
    await page.getByText('No code-host integrations in this workspace.').waitFor();
    await screenshots(page, 'code-hosts');

    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByLabel('Name').fill('ci');
    await page.getByRole('button', { name: 'Create key' }).click();
    const shown = page.getByLabel('The new API key');
    await shown.waitFor();
    const key = await shown.innerText();
    assert.match(key, /^slw_/);
    await page.getByRole('row', { name: /ci/ }).waitFor();
    await screenshots(page, 'api-keys');
    await page.getByRole('button', { name: 'I have kept it' }).click();
    assert.equal(await page.getByText(key).count(), 0);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await signIn(key);
    await page.getByRole('link', { name: 'support-agent' }).waitFor();
  });
});
