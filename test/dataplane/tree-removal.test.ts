/**
 * Removing a tree an app could write (a failed build's directory, a deleted deployment's data) while
 * something swaps its directories for links. The service removes such trees as its own user, often
 * root: a removal that follows a link swapped in during its walk deletes whatever the link names.
 *
 * The swapper here plays the app at its fastest: it runs as the app's user would (nobody when the test
 * is root), renames each directory of the tree aside, puts a link to a canary directory in its place and
 * puts the directory back, over and over, while the tree is removed. What the old code did: `fs.rm` with
 * `recursive` reads a directory by its path after checking it is one, so a link swapped in between is
 * followed, and the canary's files went with the tree (0 of 101 left in the tracker's run).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { removeTree } from '../../src/dataplane/build-snapshot.ts';

const CANARY_FILES = 101;
const ROUNDS = 25;
const DIRS = 60;
const isRoot = process.getuid?.() === 0;
/** The user the swapper runs as: an app's (nobody) when the service is root, else the service's own. */
const appUser = isRoot ? { uid: 65534, gid: 65534 } : null;

const SWAPPER = String.raw`
const fs = require('node:fs');
const path = require('node:path');
const [base, canary] = process.argv.slice(1);
let swaps = 0;
const names = Array.from({ length: ${DIRS} }, (_, i) => 'd' + i);
for (;;) {
  for (const name of names) {
    const dir = path.join(base, name);
    try {
      fs.renameSync(dir, dir + '.away');
      fs.symlinkSync(canary, dir);
      // Its count, on stdout as it goes (the loop never yields to the event loop).
      if (++swaps % 20 === 1) fs.writeSync(1, swaps + '\n');
      fs.unlinkSync(dir);
      fs.renameSync(dir + '.away', dir);
    } catch {
      // The tree is going away under us: keep trying the others.
    }
  }
  try {
    fs.statSync(base);
  } catch {
    process.exit(0);
  }
}
`;

let root: string;
let canary: string;

before(async () => {
  root = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-removal-')));
  // Passable by the app's user, so that it reaches the tree it owns inside.
  await fs.chmod(root, 0o711);
  canary = path.join(root, 'canary');
  await fs.mkdir(canary);
  for (let i = 0; i < CANARY_FILES; i++) await fs.writeFile(path.join(canary, `keep-${i}`), 'keep');
});
after(async () => {
  await fs.rm(root, { recursive: true, force: true });
});

async function makeTree(base: string): Promise<void> {
  for (let i = 0; i < DIRS; i++) {
    await fs.mkdir(path.join(base, `d${i}`, 'inner'), { recursive: true });
    for (let f = 0; f < 5; f++) await fs.writeFile(path.join(base, `d${i}`, 'inner', `f${f}`), 'x');
  }
  if (appUser) {
    for (const entry of await fs.readdir(base, { recursive: true }))
      await fs.lchown(path.join(base, entry), appUser.uid, appUser.gid);
    await fs.lchown(base, appUser.uid, appUser.gid);
  }
}

function startSwapper(base: string): { child: ChildProcess; swaps: () => number; started: Promise<void> } {
  let swaps = 0;
  const child = spawn(process.execPath, ['-e', SWAPPER, base, canary], {
    stdio: ['ignore', 'pipe', 'inherit'],
    ...(appUser ?? {}),
  });
  const started = new Promise<void>((resolve) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      swaps = Number(chunk.trim().split('\n').pop());
      resolve();
    });
    child.once('exit', () => resolve());
  });
  return { child, swaps: () => swaps, started };
}

test('removing a tree whose directories are swapped for links during the removal never deletes what a link names', async () => {
  let swapsSeen = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const base = path.join(root, `tree-${round}`);
    await fs.mkdir(base);
    await makeTree(base);
    const swapper = startSwapper(base);
    await swapper.started;
    const exited = new Promise((resolve) => swapper.child.once('exit', resolve));
    try {
      await removeTree(base).catch(() => {
        // The swapper may put a directory back while rm walks: a failure to remove is not what this
        // test is about; what rm deleted through a link is.
      });
    } finally {
      swapper.child.kill('SIGKILL');
      await exited;
    }
    swapsSeen += swapper.swaps();
    const left = await fs.readdir(canary);
    assert.equal(left.length, CANARY_FILES, `round ${round}: canary files left: ${left.length} of ${CANARY_FILES}`);
    await fs.rm(base, { recursive: true, force: true });
  }
  assert.ok(swapsSeen > ROUNDS, `the swapper swapped ${swapsSeen} times only`);
});

test('a tree is removed whole, links in it are removed and not followed, and a missing tree is no error', async () => {
  const base = path.join(root, 'plain');
  const kept = path.join(root, 'kept');
  await fs.mkdir(kept);
  await fs.writeFile(path.join(kept, 'keep-0'), 'keep');
  await fs.mkdir(path.join(base, 'a', 'b'), { recursive: true });
  await fs.writeFile(path.join(base, 'a', 'b', 'f'), 'x');
  await fs.symlink(kept, path.join(base, 'a', 'link-to-kept'));
  await fs.symlink(path.join(kept, 'keep-0'), path.join(base, 'link-to-file'));
  // Sealed: no write bits anywhere (a finished build).
  await fs.chmod(path.join(base, 'a', 'b'), 0o555);
  await fs.chmod(path.join(base, 'a'), 0o555);
  await removeTree(base);
  await assert.rejects(fs.lstat(base), { code: 'ENOENT' });
  assert.deepEqual(await fs.readdir(kept), ['keep-0']);
  assert.equal(await fs.readFile(path.join(kept, 'keep-0'), 'utf8'), 'keep');
  await removeTree(base);
});
