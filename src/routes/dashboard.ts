/**
 * The web dashboard (docs/dashboard.md): the pages built from web/ into web/dist, served at `/` without
 * an API key. The pages sign a person in and then make their API calls with it: an API key (kept in
 * the tab, sent as X-Api-Key), or through single sign-on (src/routes/sso.ts), where the HttpOnly
 * session cookie goes with every call by itself and the page keeps no secret; Sign out ends the
 * session at the service (POST /v2/sso/logout). Admins manage who may sign in (mappings) with the API
 * only for now. Hashed files under /assets/ are cached for good; index.html never, so a new build is
 * picked up at the next visit.
 *
 * Any other path a browser navigates to gets index.html too, so the dashboard's own paths
 * (/deployments/<id>, ...) can be reloaded and linked to; the router picks the page. Never for the
 * API's paths (RESERVED), nor for requests that do not ask for HTML (API clients keep the usual 404),
 * nor for file names (a missing asset is a 404, not a page). Deployed apps never get here: they are
 * served by the app edge on a port of their own (src/dataplane/app-edge.ts); `/apps/` stays reserved, so
 * a link of the old path form gets a 404 rather than the dashboard.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { needs } from '../http/route-needs.ts';

export const DASHBOARD_DIR = fileURLToPath(new URL('../../web/dist/', import.meta.url));

/** Paths that belong to the API, the docs or the apps: never answered with the dashboard. */
const RESERVED = /^\/(v\d+|api|apps|docs|openapi\.json|healthz|readyz|metrics|assets)(\/|$)/;
/** A last segment with an extension names a file, not a page. */
const FILE_NAME = /\/[^/]*\.[A-Za-z0-9]+$/;

/**
 * The pages run with the key in session storage: no inline scripts, no other origins, no framing, and
 * no referrer carrying a deployment id to the sites it links to.
 */
const PAGE_HEADERS = {
  'content-security-policy': [
    "default-src 'self'",
    "img-src 'self' data:",
    "style-src 'self'",
    "script-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; '),
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

const NOT_BUILT = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Slipway</title></head>
<body>
<h1>The Slipway dashboard is not built</h1>
<p>This service is running, but its web pages have not been built from <code>web/</code>. Build them with</p>
<pre>npm run build:web</pre>
<p>(<code>npm ci</code> does it too, when dev dependencies are installed), then reload this page. The API works meanwhile: see <a href="/docs">/docs</a>.</p>
</body></html>
`;

export interface DashboardRouteDeps {
  /** Where the built pages are; default web/dist of this checkout. */
  dir?: string;
}

export const dashboardRoutes: FastifyPluginAsync<DashboardRouteDeps> = async (app, deps) => {
  const dir = deps.dir ?? DASHBOARD_DIR;

  // Every route of the dashboard is public (the pages themselves authenticate their API calls) and out
  // of the API's document.
  const page = { config: needs({ auth: 'none' }), schema: { hide: true } };

  // The built files: names carry their content hash, so a year of caching is safe. Public like the
  // pages: said here, of the routes of @fastify/static only (it takes no route options).
  await app.register(async (assets) => {
    assets.addHook('onRoute', (route) => {
      route.config = { ...route.config, auth: 'none' };
      route.schema = { ...route.schema, hide: true };
    });
    await assets.register(fastifyStatic, {
      root: path.join(dir, 'assets'),
      prefix: '/assets/',
      index: false,
      immutable: true,
      maxAge: '365d',
      wildcard: true,
      decorateReply: false,
    });
  });
  // reply.sendFile for the pages below (no routes of its own).
  await app.register(fastifyStatic, { root: dir, serve: false });

  const sendPage = async (_request: FastifyRequest, reply: FastifyReply) => {
    const built = await fs.access(path.join(dir, 'index.html')).then(
      () => true,
      () => false,
    );
    reply.headers(PAGE_HEADERS).header('cache-control', 'no-cache');
    if (!built) return reply.type('text/html; charset=utf-8').send(NOT_BUILT);
    return reply.sendFile('index.html', dir, { cacheControl: false });
  };

  app.get('/', page, sendPage);
  app.get('/*', page, async (request, reply) => {
    const pathname = request.url.split('?')[0]!;
    const wantsPage = (request.headers.accept ?? '').includes('text/html');
    if (!wantsPage || RESERVED.test(pathname) || FILE_NAME.test(pathname)) return reply.callNotFound();
    return sendPage(request, reply);
  });
};
