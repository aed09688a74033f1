/**
 * Organization keys in the dashboard: an admin key of an organization with several workspaces picks
 * one at sign-in and can switch in the header; each workspace shows only its own deployments.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { client, createTestApp, type TestApp, listen } from '../support/harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage, screenshots } from './browser.ts';
import { test } from '../support/limited-test.ts';

let t: TestApp;
let base: string;
let browser: Browser;
let page: Page;

before(async () => {
  await ensureDashboardBuilt();
  t = await createTestApp();
  await listen(t.app);
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  browser = await launchChromium();
  page = await openPage(browser);
});

after(async () => {
  await browser?.close();
  await t?.close();
});

test('an organization key picks a workspace at sign-in and switches in the header', async () => {
  const org = client(t.app, t.orgKey);
  const staging = await org.post('/v2/workspaces', { name: 'staging' });
  assert.equal(staging.status, 201);
  const defaultName = (await org.get('/v2/workspaces')).body.resources.find(
    (w: { id: string }) => w.id === t.workspaceId,
  ).name as string;
  // A deployment without a source yet: no revision, nothing for a worker to do.
  assert.equal(
    (
      await client(t.app, t.orgKey, staging.body.id).post('/v2/deployments', {
        name: 'staging-agent',
        source: 'internal_source',
      })
    ).status,
    201,
  );
  assert.equal(
    (
      await client(t.app, t.orgKey, t.workspaceId).post('/v2/deployments', {
        name: 'default-agent',
        source: 'internal_source',
      })
    ).status,
    201,
  );

  await page.goto(`${base}/`);
  await page.getByLabel('API key').fill(t.orgKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('group', { name: /several workspaces/ }).waitFor();
  await screenshots(page, 'workspace-picker');
  await page.getByLabel('staging').check();
  await page.getByRole('button', { name: 'Open workspace' }).click();
  await page.getByRole('link', { name: 'staging-agent' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'default-agent' }).count(), 0);

  await page.getByLabel('Workspace').selectOption({ label: defaultName });
  await page.getByRole('link', { name: 'default-agent' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'staging-agent' }).count(), 0);

  // The choice lasts for the tab: a reload keeps the key and the workspace.
  await page.reload();
  await page.getByRole('link', { name: 'default-agent' }).waitFor();
  assert.equal(await page.getByLabel('Workspace').inputValue(), t.workspaceId);
});
