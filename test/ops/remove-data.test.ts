/**
 * `slipway remove-data` as a user runs it to start again: `rm -rf .slipway` fails on a sealed build (no
 * write bits), so the command removes what the service keeps, its own way. CI runs this file as root and
 * as an ordinary user (.ci/as-ordinary-user), where the sealed trees are what stops `rm`.
 *
 * What it must hold to: nothing is removed without --yes, nor while a service holds the data directory;
 * a link inside the tree is removed, never what it names; the apps' data directory goes too when it lies
 * elsewhere.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before } from 'node:test';
import { lockDataDir } from '../../src/db/data-dir-lock.ts';
import { cliUser, type CliUser } from '../cli/cli-runner.ts';
import { test } from '../support/limited-test.ts';

const run = promisify(execFile);
let user: CliUser;
let scratch: string;

before(async () => {
  user = await cliUser();
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-remove-data-'));
});
after(async () => {
  await run('chmod', ['-R', 'u+rwX', scratch]).catch(() => undefined);
  await fs.rm(scratch, { recursive: true, force: true });
  await user.remove();
});

/** A data directory as a service leaves it: a sealed build (read-only all through), an unreadable directory, files. */
async function dataDirectory(name: string): Promise<string> {
  const dir = path.join(scratch, name);
  const src = path.join(dir, 'revisions', 'r1', 'app', 'src');
  await fs.mkdir(path.join(src, 'node_modules', 'pkg'), { recursive: true });
  await fs.writeFile(path.join(src, 'node_modules', 'pkg', 'index.js'), 'module.exports = 1;\n');
  await fs.writeFile(path.join(src, 'server.js'), '// the app\n');
  await fs.mkdir(path.join(dir, 'deployments', 'd1', 'data', 'locked'), { recursive: true });
  await fs.writeFile(path.join(dir, 'encryption.key'), 'k'.repeat(64), { mode: 0o600 });
  // Sealed: no write bits anywhere in the build; an app made a directory nobody may read.
  await run('chmod', ['-R', 'a-w', path.join(dir, 'revisions')]);
  await fs.chmod(path.join(dir, 'deployments', 'd1', 'data', 'locked'), 0o000);
  return dir;
}

test('without --yes nothing is removed, and it says what would be', async () => {
  const dir = await dataDirectory('unasked');
  const result = await user.run(['remove-data'], { env: { SLIPWAY_DATA_DIR: dir } });
  assert.equal(result.code, 2, result.stderr);
  assert.match(result.stderr, new RegExp(`removes ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} for good.*--yes`));
  assert.ok(await fs.stat(path.join(dir, 'encryption.key')));
});

test('a data directory a service holds is not touched', async () => {
  const dir = await dataDirectory('held');
  const lock = await lockDataDir(dir, { logger: { warn: () => undefined }, command: 'service' });
  try {
    const result = await user.run(['remove-data', '--yes'], { env: { SLIPWAY_DATA_DIR: dir } });
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /in use|is used|holds/i);
    assert.ok(await fs.stat(path.join(dir, 'encryption.key')), 'the key is still there');
  } finally {
    await lock.release();
  }
});

test("a sealed data directory is removed, and the apps' directory elsewhere with it; links inside lead nowhere", async () => {
  const dir = await dataDirectory('sealed');
  // What plain rm -rf meets as this user: a sealed tree it cannot empty (root can).
  if (process.getuid?.() !== 0) {
    const plain = await run('rm', ['-rf', dir]).then(
      () => null,
      (error: { stderr: string }) => error.stderr,
    );
    assert.match(
      plain ?? '',
      /Permission denied/,
      'rm -rf removed a sealed tree: the case this command is for is gone',
    );
  }
  const apps = path.join(scratch, 'apps-elsewhere');
  await fs.mkdir(path.join(apps, 'd2', 'data'), { recursive: true });
  // An app's links to what is not the service's: a file and a directory of someone else's.
  const outside = path.join(scratch, 'outside');
  await fs.mkdir(path.join(outside, 'dir'), { recursive: true });
  await fs.writeFile(path.join(outside, 'file'), 'keep me');
  await fs.writeFile(path.join(outside, 'dir', 'inner'), 'keep me too');
  await fs.symlink(path.join(outside, 'file'), path.join(apps, 'd2', 'data', 'to-file'));
  await fs.symlink(path.join(outside, 'dir'), path.join(apps, 'd2', 'data', 'to-dir'));

  const result = await user.run(['remove-data', '--yes'], {
    env: { SLIPWAY_DATA_DIR: dir, SLIPWAY_APPS_DATA_DIR: apps },
  });
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, new RegExp(`Removed ${path.basename(dir)}|Removed .*${path.basename(dir)}`));
  for (const gone of [dir, apps])
    assert.equal(
      await fs.lstat(gone).catch(() => null),
      null,
      `${gone} is still there:\n${result.stdout}${result.stderr}`,
    );
  assert.equal(await fs.readFile(path.join(outside, 'file'), 'utf8'), 'keep me');
  assert.equal(await fs.readFile(path.join(outside, 'dir', 'inner'), 'utf8'), 'keep me too');

  // Again: nothing left, said so, not an error.
  const again = await user.run(['remove-data', '--yes'], {
    env: { SLIPWAY_DATA_DIR: dir, SLIPWAY_APPS_DATA_DIR: apps },
  });
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /Nothing to remove/);
});
