#!/usr/bin/env node
// The `slipway-listener` command. In a clone with the development dependencies it registers tsx and runs
// the TypeScript as-is (src/main.ts), as `npm run listener` does; without tsx (a production-only
// install: tsx is a development dependency) it runs the bundle of `npm run build:listener`
// (dist/listener.mjs), as the image does.
import { existsSync } from 'node:fs';

let tsx = null;
try {
  tsx = await import('tsx/esm/api');
} catch (error) {
  if (error?.code !== 'ERR_MODULE_NOT_FOUND') throw error;
}
if (tsx) {
  tsx.register();
  await import('./src/main.ts');
} else {
  const bundle = new URL('./dist/listener.mjs', import.meta.url);
  if (!existsSync(bundle)) {
    process.stderr.write(
      'slipway-listener: tsx is not installed (a production-only install) and there is no bundle: run `npm run build:listener` first, or `npm ci` for the development dependencies\n',
    );
    process.exit(1);
  }
  await import(bundle.href);
}
