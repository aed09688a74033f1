/**
 * The dashboard's build (`vite build web`, run by `npm ci` through the prepare script) and its
 * development server (`npx vite web`): the dev server proxies the API to a running service, so the
 * pages call the same paths as when the service serves them itself (docs/dashboard.md).
 */
import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

/** The service the dev server sends API requests to; `SLIPWAY_URL=http://host:port npx vite web`. */
const api = process.env.SLIPWAY_URL ?? 'http://127.0.0.1:8124';
const API_PATHS = ['/v1', '/v2', '/openapi.json', '/healthz', '/readyz'];

export default defineConfig({
  plugins: [preact()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Only what the service serves: index.html and hashed files under /assets/ (src/routes/dashboard.ts).
    assetsDir: 'assets',
    sourcemap: false,
  },
  server: {
    proxy: Object.fromEntries(API_PATHS.map((path) => [path, { target: api, changeOrigin: false }])),
  },
});
