/**
 * The embedded PostgreSQL's programs installed where the server's user cannot reach them (a clone in a
 * private home: /root when the service runs as root and the server as `postgres`, another user's home
 * for an ordinary user) are refused before anything is made, with one line saying which directory
 * and what to do, not a `spawn ... EACCES` stack trace (issue 34, item 6). Runs as root and as an
 * ordinary user: each meets its own case.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { ConfigError } from '../../src/config.ts';
import { startEmbeddedPostgres } from '../../src/db/embedded-postgres.ts';

const logger = { info() {}, warn() {}, debug() {}, error() {} };

test('programs under a directory the server cannot enter: one clear refusal, nothing made', async () => {
  const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-pg-binaries-'));
  try {
    let home: string;
    if (process.getuid?.() === 0) {
      // As root the server runs as 'postgres', which cannot enter a 0700 home of root's.
      home = path.join(scratch, 'home');
      await fs.mkdir(path.join(home, 'bin'), { recursive: true });
      await fs.chmod(scratch, 0o755);
      await fs.chmod(home, 0o700);
      for (const name of ['initdb', 'postgres'])
        await fs.writeFile(path.join(home, 'bin', name), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
    } else {
      // An ordinary user cannot enter root's home, where a clone of root's would be.
      home = '/root';
      const mode = (await fs.stat(home)).mode & 0o777;
      assert.equal(mode & 0o001, 0, `this test needs /root closed to others (it is ${mode.toString(8)})`);
    }
    const clusterDir = path.join(scratch, 'data', 'postgres');
    const binaries = {
      initdb: path.join(home, 'bin', 'initdb'),
      postgres: path.join(home, 'bin', 'postgres'),
    };
    const refused = await startEmbeddedPostgres({ clusterDir, logger, binaries }).then(
      async (server) => {
        await server.stop();
        return null;
      },
      (error: unknown) => error,
    );
    assert.ok(refused instanceof ConfigError, `a ConfigError (one line at start), not ${String(refused)}`);
    assert.match(refused.message, new RegExp(`cannot enter ${home.replace(/[/.]/g, '\\$&')}\\b`));
    assert.match(refused.message, /node_modules/);
    assert.match(refused.message, /DATABASE_URL/);
    assert.doesNotMatch(refused.message, /EACCES|spawn/);
    assert.equal(
      await fs.stat(path.join(scratch, 'data')).then(
        () => 'made',
        () => 'nothing',
      ),
      'nothing',
      'nothing was made',
    );
  } finally {
    await fs.rm(scratch, { recursive: true, force: true });
  }
});
