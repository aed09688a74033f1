/**
 * Apps never share an origin with the dashboard: in Chromium, an admin signed in to the dashboard (API
 * origin, key in the dashboard's session storage) follows a link to an app served through the edge at
 * `http://<slug>.localhost:<apps port>/`, whose page tries everything a hostile app would: read storage,
 * reach back through window.opener, call the API with the browser's credentials, install a service worker
 * with the widest scope. None of it yields the key or touches the dashboard's origin.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { ADMIN_KEY, createTestApp, type TestApp, listen } from '../support/harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage } from './browser.ts';
import { test } from '../support/limited-test.ts';

const SLUG = 'hostile-0000abcd';
const MARKER = 'hostile app page';
const PAGE_DEADLINE_MS = 30_000;

/** What the hostile page found, reported on the page itself. */
interface Loot {
  sessionStorage: Record<string, string>;
  localStorage: Record<string, string>;
  opener: string;
  api: string;
  apiWithCredentials: string;
  serviceWorker: string;
}

/** The app: a page whose script loots what it can, and a service worker that asks for the widest scope. */
function hostilePage(apiBase: string): string {
  return `<!doctype html><title>${MARKER}</title><body><p>${MARKER}</p><script>
const dump = (storage) => { const out = {}; try { for (let i = 0; i < storage.length; i++) { const k = storage.key(i); out[k] = storage.getItem(k); } } catch (e) { out.error = String(e); } return out; };
const attempt = async (f) => { try { return String(await f()); } catch (e) { return 'refused: ' + e.name; } };
(async () => {
  const loot = {
    sessionStorage: dump(window.sessionStorage),
    localStorage: dump(window.localStorage),
    opener: await attempt(() => window.opener ? JSON.stringify(dump(window.opener.sessionStorage)) : 'no opener'),
    api: await attempt(async () => { const r = await fetch(${JSON.stringify(`${apiBase}/v2/deployments`)}); return r.status + ' ' + await r.text(); }),
    apiWithCredentials: await attempt(async () => { const r = await fetch(${JSON.stringify(`${apiBase}/v2/api-keys`)}, { credentials: 'include' }); return r.status + ' ' + await r.text(); }),
    serviceWorker: await attempt(async () => { const reg = await navigator.serviceWorker.register('/sw.js', { scope: '/' }); return reg.scope; }),
  };
  const out = document.createElement('pre');
  out.id = 'loot';
  out.textContent = JSON.stringify(loot);
  document.body.append(out);
})();
</script></body>`;
}

let t: TestApp;
let apiBase: string;
let appServer: http.Server;
let browser: Browser;
let page: Page;

before(async () => {
  await ensureDashboardBuilt();
  t = await createTestApp({}, { edge: true });
  await listen(t.app);
  apiBase = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
  appServer = http.createServer((req, res) => {
    if (req.url === '/sw.js') {
      // The header that would widen a worker's scope; the edge drops it, and the scope is the app's origin anyway.
      res.writeHead(200, { 'content-type': 'text/javascript', 'service-worker-allowed': '/' });
      res.end('self.addEventListener("fetch", () => {});');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(hostilePage(apiBase));
  });
  await new Promise<void>((resolve) => appServer.listen(0, '127.0.0.1', resolve));
  await t.edge!.setTargets(SLUG, [{ instanceId: 'i-1', port: (appServer.address() as AddressInfo).port }]);
  browser = await launchChromium();
  page = await openPage(browser);
  page.setDefaultTimeout(PAGE_DEADLINE_MS);
});

after(async () => {
  await browser?.close();
  await t?.close();
  appServer?.closeAllConnections();
  await new Promise<void>((resolve) => (appServer ? appServer.close(() => resolve()) : resolve()));
});

test("an app page opened from the signed-in dashboard cannot read the key or act with the dashboard's rights", async () => {
  await page.goto(`${apiBase}/`);
  await page.getByLabel('API key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  const stored = await page.evaluate(() => JSON.stringify(window.sessionStorage));
  assert.ok(stored.includes(ADMIN_KEY), 'the dashboard keeps the key in its session storage');

  const appUrl = `http://${SLUG}.localhost:${t.edge!.port}/`;
  // Followed from the dashboard, as a link a user clicks (window.open keeps the opener).
  const [appPage] = await Promise.all([
    page.context().waitForEvent('page'),
    page.evaluate((url) => void window.open(url, '_blank'), appUrl),
  ]);
  await appPage.waitForLoadState();
  assert.equal(await appPage.title(), MARKER, 'the app is served at its own host name on the apps port');
  const loot = JSON.parse(await appPage.locator('#loot').innerText({ timeout: PAGE_DEADLINE_MS })) as Loot;

  assert.ok(!JSON.stringify(loot).includes(ADMIN_KEY), `the app page got the key: ${JSON.stringify(loot)}`);
  assert.deepEqual(loot.sessionStorage, {}, "the app's session storage is its own, empty");
  assert.deepEqual(loot.localStorage, {});
  assert.equal(loot.opener, 'refused: SecurityError', 'the dashboard window cannot be read through opener');
  assert.match(loot.api, /^refused|^401/, 'the API gives the app page nothing');
  assert.match(loot.apiWithCredentials, /^refused|^401/, 'the browser holds no credential the API would honour');
  // A worker the app installs is scoped to the app's own origin: the dashboard has none.
  assert.doesNotMatch(loot.serviceWorker, new RegExp(`^${apiBase.replace(/\./g, '\\.')}`));
  const dashboardWorkers = await page.evaluate(async () => (await navigator.serviceWorker.getRegistrations()).length);
  assert.equal(dashboardWorkers, 0, 'no service worker on the dashboard origin');
  await appPage.close();
});

test("the API's port serves no app, by path or by host name", async () => {
  for (const url of [
    `${apiBase}/apps/${SLUG}/`,
    `http://${SLUG}.localhost:${new URL(apiBase).port}/`,
    `http://${SLUG}.localhost:${new URL(apiBase).port}/apps/${SLUG}/`,
  ]) {
    await page.goto(url);
    const text = await page.content();
    assert.ok(!text.includes(MARKER), `${url} served the app`);
  }
});
