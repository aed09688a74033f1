/**
 * How the service serves the dashboard (src/routes/dashboard.ts): the pages at `/` and at every page
 * path a browser opens, without a key; the API's own paths and answers untouched; an explanation
 * instead of a 404 when the pages were never built.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Fastify from 'fastify';
import { dashboardRoutes } from '../../src/routes/dashboard.ts';
import { DIST_DIR } from '../../web/build.ts';
import { createTestApp, type TestApp } from '../support/harness.ts';
import { ensureDashboardBuilt } from './browser.ts';

const HTML = { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' };

describe('serving the dashboard', () => {
  let t: TestApp;
  before(async () => {
    await ensureDashboardBuilt();
    t = await createTestApp();
  });
  after(() => t?.close());

  test('/ is the dashboard, public, never cached, and locked to its own origin', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/', headers: HTML });
    assert.equal(response.statusCode, 200);
    assert.match(String(response.headers['content-type']), /^text\/html/);
    assert.match(response.body, /<div id="app">/);
    assert.equal(response.headers['cache-control'], 'no-cache');
    assert.match(String(response.headers['content-security-policy']), /default-src 'self'/);
    assert.match(String(response.headers['content-security-policy']), /frame-ancestors 'none'/);
  });

  test('a page path opened in a browser gets the dashboard, so reloads and links work', async () => {
    for (const url of [
      '/deployments',
      '/deployments/0b9e1c2d-0000-4000-8000-000000000000/revisions/0b9e1c2d-0000-4000-8000-000000000001/logs?type=deploy',
      '/api-keys',
    ]) {
      const response = await t.app.inject({ method: 'GET', url, headers: HTML });
      assert.equal(response.statusCode, 200, url);
      assert.match(response.body, /<div id="app">/, url);
    }
  });

  test('the built assets are served and cached for good; a missing one is a 404', async () => {
    const [script] = (await fs.readdir(path.join(DIST_DIR, 'assets'))).filter((name) => name.endsWith('.js'));
    assert.ok(script);
    const response = await t.app.inject({ method: 'GET', url: `/assets/${script}` });
    assert.equal(response.statusCode, 200);
    assert.match(String(response.headers['content-type']), /javascript/);
    assert.match(String(response.headers['cache-control']), /immutable/);
    assert.equal((await t.app.inject({ method: 'GET', url: '/assets/nope-123.js', headers: HTML })).statusCode, 404);
  });

  test('the API keeps its paths and its answers, even to a browser', async () => {
    for (const url of [
      '/v2/nope',
      '/v1/nope',
      '/v2/deployments/x/y/z',
      '/api/deployments',
      '/apps/not-a-slug/',
      '/docs/nope/deeper',
      '/metrics/x',
      '/favicon.ico',
    ]) {
      const response = await t.app.inject({ method: 'GET', url, headers: HTML });
      assert.equal(response.statusCode, 404, url);
      assert.match(String(response.headers['content-type']), /application\/json/, url);
    }
    // Clients that do not ask for HTML (curl, SDKs) get the API's 404 on any unknown path.
    const curl = await t.app.inject({ method: 'GET', url: '/deployments', headers: { accept: '*/*' } });
    assert.equal(curl.statusCode, 404);
    assert.equal(JSON.parse(curl.body).code, 'route_not_found');
    // The API itself still needs a key; the dashboard's routes are not in its document.
    assert.equal((await t.app.inject({ method: 'GET', url: '/v2/deployments', headers: HTML })).statusCode, 401);
    const document = JSON.parse((await t.app.inject({ method: 'GET', url: '/openapi.json' })).body) as {
      paths: Record<string, unknown>;
    };
    assert.deepEqual(
      Object.keys(document.paths).filter((p) => p === '/' || p.startsWith('/assets') || p === '/*' || p === '/{*}'),
      [],
    );
  });

  test('without built pages, / says how to build them instead of a 404', async () => {
    const empty = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-no-dashboard-'));
    const app = Fastify();
    await app.register(dashboardRoutes, { dir: empty });
    try {
      for (const url of ['/', '/deployments']) {
        const response = await app.inject({ method: 'GET', url, headers: HTML });
        assert.equal(response.statusCode, 200, url);
        assert.match(response.body, /not built/, url);
        assert.match(response.body, /npm run build:web/, url);
      }
    } finally {
      await app.close();
      await fs.rm(empty, { recursive: true, force: true });
    }
  });
});
