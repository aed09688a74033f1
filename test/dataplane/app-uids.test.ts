/**
 * The operator's range of deployment uids (SLIPWAY_APP_UIDS, src/config-apps.ts) and what the start
 * log says of it (src/dataplane/app-uids.ts): a range is validated once at start, naming the variable,
 * and one that shares ids with a user or an /etc/subuid range is named in the start log.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { appUids } from '../../src/config-apps.ts';
import { ConfigError } from '../../src/config-values.ts';
import { rangeOverlaps } from '../../src/dataplane/app-uids.ts';

test('SLIPWAY_APP_UIDS: 65,536 ids from 1,000,000,000 by default; FIRST-LAST otherwise', () => {
  assert.deepEqual(appUids({}), { first: 1_000_000_000, count: 65_536 });
  assert.deepEqual(appUids({ SLIPWAY_APP_UIDS: '200000-200099' }), { first: 200_000, count: 100 });
});

test('a range that is not one, reaches system ids or passes 2^31 stops the start, naming the variable', () => {
  for (const bad of ['1000-2000', '300000-200000', '2000000000-2147483647', 'lots', '100000:65536', '-5-10']) {
    assert.throws(
      () => appUids({ SLIPWAY_APP_UIDS: bad }),
      (error: unknown) => error instanceof ConfigError && /SLIPWAY_APP_UIDS/.test(error.message),
      bad,
    );
  }
});

test('users and /etc/subuid ranges that share ids with the range are named for the start log', async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-app-uids-'));
  try {
    const passwd = path.join(dir, 'passwd');
    const subuid = path.join(dir, 'subuid');
    await fs.writeFile(passwd, 'root:x:0:0::/root:/bin/sh\nsquatter:x:300005:300005::/:/bin/false\n');
    await fs.writeFile(subuid, 'ci:100000:65536\nother:299000:2000\n');
    const range = { first: 300_000, count: 100 };
    assert.deepEqual(rangeOverlaps(range, { passwd, subuid }), [
      'user squatter (300005)',
      'the /etc/subuid range of other (299000-300999)',
    ]);
    assert.deepEqual(rangeOverlaps({ first: 400_000, count: 100 }, { passwd, subuid }), []);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
