#!/usr/bin/env node
// The `slipway` command. In a clone with the development dependencies it registers tsx and runs the
// TypeScript as-is (src/cli/main.ts), as `npm start` does; after a production-only install (tsx is a
// development dependency) it runs the compiled CLI of `npm run build` (dist/src/cli/main.js).
import { existsSync } from 'node:fs';

let tsx = null;
try {
  tsx = await import('tsx/esm/api');
} catch (error) {
  if (error?.code !== 'ERR_MODULE_NOT_FOUND') throw error;
}
if (tsx) {
  tsx.register();
  await import('../src/cli/main.ts');
} else {
  const compiled = new URL('../dist/src/cli/main.js', import.meta.url);
  if (!existsSync(compiled)) {
    process.stderr.write(
      'slipway: tsx is not installed (a production-only install) and there is no compiled CLI: run `npm run build` first, or `npm ci` for the development dependencies\n',
    );
    process.exit(1);
  }
  await import(compiled.href);
}
