// `npm ci`'s prepare step: builds the dashboard (web/build.ts, run through tsx). tsx, like Vite, is a
// development dependency: an install without them (`npm ci --omit=dev`) skips the build and says so,
// rather than failing the whole install (web/build.ts explains the same for a missing Vite).
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

try {
  createRequire(import.meta.url).resolve('tsx');
} catch {
  process.stdout.write(
    'slipway: tsx is not installed (dev dependencies omitted), so the dashboard was not built; run `npm ci` with dev dependencies, then `npm run build:web`.\n',
  );
  process.exit(0);
}
const result = spawnSync(process.execPath, ['--import', 'tsx', 'web/build.ts'], { stdio: 'inherit' });
process.exit(result.status ?? 1);
