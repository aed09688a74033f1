/**
 * Single sign-on in a real browser against a real OpenID provider on loopback: a person signs in with
 * the provider, sees their workspace, makes a change (audited under them), and signs out. The session
 * is an HttpOnly cookie the page cannot read, kept from the apps' host names; nothing that opens the
 * API is in page storage. A person no mapping lets in gets a page that says so.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { client, listen } from '../support/harness.ts';
import { createSsoTestApp, type SsoTestApp } from '../sso/sso-harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage, screenshots } from './browser.ts';
import { test } from '../support/limited-test.ts';

let t: SsoTestApp;
let base: string;
let browser: Browser;
let page: Page;
/** Stands for a deployed app at `demo.localhost` (the default apps domain): it records the cookies it gets. */
let app: http.Server;
let appCookies: string[] = [];

before(async () => {
  await ensureDashboardBuilt();
  // The dashboard at localhost, as on a laptop; apps are at <name>.localhost, another host name.
  t = await createSsoTestApp({ env: { SLIPWAY_PUBLIC_URL: 'http://localhost:{port}' } });
  base = t.publicUrl;
  await listen(t.app, t.port);
  app = http.createServer((req, res) => {
    appCookies.push(req.headers.cookie ?? '');
    res.writeHead(200, { 'content-type': 'text/plain' }).end('the app');
  });
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', () => resolve()));
  const org = client(t.app, t.orgKey);
  assert.equal(
    (
      await org.post('/v2/sso/mappings', {
        kind: 'group',
        value: 'platform-team',
        workspace_id: t.workspaceId,
        role: 'admin',
      })
    ).status,
    201,
  );
  assert.equal(
    (await client(t.app).post('/v2/deployments', { name: 'support-agent', source: 'internal_source' })).status,
    201,
  );
  t.provider.accounts.set('alice', { email: 'alice@example.test', groups: ['platform-team'] });
  browser = await launchChromium();
  page = await openPage(browser);
  page.setDefaultTimeout(30_000);
});

after(async () => {
  await browser?.close();
  await new Promise<void>((resolve) => (app ? app.close(() => resolve()) : resolve()));
  await t?.close();
});

/** Through the provider's own pages, as the person would. */
async function signInAtProvider(login: string): Promise<void> {
  await page.getByRole('button', { name: 'Sign in with Test IdP' }).click();
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any password');
  await page.getByRole('button', { name: 'Sign-in' }).click();
  await page.getByRole('button', { name: 'Continue' }).click();
}

test('a person signs in with the provider, sees the workspace, makes a change, and signs out', async () => {
  await page.goto(`${base}/`);
  await page.getByRole('button', { name: 'Sign in with Test IdP' }).waitFor();
  await screenshots(page, 'sso-sign-in');
  await signInAtProvider('alice');

  await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  await page.getByRole('link', { name: 'support-agent' }).waitFor();
  assert.equal(await page.getByText('alice@example.test').isVisible(), true, 'the header names the person');
  await screenshots(page, 'sso-signed-in');

  // Nothing that opens the API is where the page's scripts could read it.
  assert.equal(await page.evaluate(() => document.cookie), '', 'the session cookie is HttpOnly');
  const stored = await page.evaluate(() => JSON.stringify({ ...window.sessionStorage, ...window.localStorage }));
  assert.doesNotMatch(stored, /slw_|apiKey/);
  const cookies = await page.context().cookies(base);
  const session = cookies.find((c) => c.name === 'slipway_session');
  assert.ok(session, 'the browser holds the session cookie');
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, 'Lax');

  // A change: an API key made on the API keys page, by the person.
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByRole('heading', { name: 'API keys' }).waitFor();
  await page.getByLabel('Name').fill('made-by-alice');
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.getByRole('cell', { name: 'made-by-alice' }).waitFor();
  const writes = await t.database.db
    .selectFrom('events')
    .select(['data'])
    .where('type', '=', 'sso_session.write')
    .execute();
  assert.ok(
    writes.some(
      (w) =>
        (w.data as { email?: string; operation?: string }).email === 'alice@example.test' &&
        (w.data as { operation?: string }).operation === 'POST /v2/api-keys',
    ),
    'the change is audited under alice',
  );

  // An app on its own host name never gets the dashboard's cookie.
  const appPort = (app.address() as AddressInfo).port;
  appCookies = [];
  await page.goto(`http://demo.localhost:${appPort}/`);
  await page.getByText('the app').waitFor();
  assert.equal(appCookies.length > 0, true);
  assert.ok(
    appCookies.every((c) => !c.includes('slipway_session')),
    `the app got ${appCookies.join(' | ')}`,
  );

  await page.goto(`${base}/deployments`);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in to Slipway' }).waitFor();
  assert.equal(
    (await page.context().cookies(base)).some((c) => c.name === 'slipway_session'),
    false,
    'the cookie is gone',
  );
  await page.reload();
  await page.getByRole('heading', { name: 'Sign in to Slipway' }).waitFor();
  const ended = await t.database.db.selectFrom('events').select('id').where('type', '=', 'sso_session.ended').execute();
  assert.equal(ended.length, 1, 'the session was ended server-side');
});

test('a person no mapping lets in is told so, and is not signed in', async () => {
  t.provider.accounts.set('outsider', { email: 'outsider@elsewhere.test', groups: ['sales'] });
  const fresh = await openPage(browser);
  page = fresh;
  page.setDefaultTimeout(30_000);
  await page.goto(`${base}/`);
  await signInAtProvider('outsider');
  await page.getByRole('heading', { name: 'No access to Slipway' }).waitFor();
  assert.match(await page.locator('main').innerText(), /outsider@elsewhere\.test/);
  await screenshots(page, 'sso-no-access');
  await page.getByRole('link', { name: 'Back to the sign-in page' }).click();
  await page.getByRole('heading', { name: 'Sign in to Slipway' }).waitFor();
});
