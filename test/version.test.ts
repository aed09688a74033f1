import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import { test } from 'node:test';
import { SLIPWAY_VERSION } from '../src/version.ts';

test("the version the service reports is package.json's", async () => {
  const manifest = JSON.parse(await fs.readFile(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  assert.equal(SLIPWAY_VERSION, manifest.version);
});
