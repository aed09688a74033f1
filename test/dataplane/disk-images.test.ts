/**
 * The two ways a deployment's or a build's image takes its room on the host (issue 33; docs/operations.md,
 * "Disk"): thin (the default: sparse, mounted with `discard`, taking what it holds) or preallocated
 * (SLIPWAY_APP_DISK_PREALLOCATE: its whole size taken at once, mounted without `discard`, and taken
 * again at each mount when a host's fstrim gave some back). Only as root, which mounting needs.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before } from 'node:test';
import { createDiskImages, probeDiskImages } from '../../src/dataplane/disk-images.ts';
import { createDiskLimiter } from '../../src/dataplane/disk-limits.ts';
import { test } from '../support/limited-test.ts';
import { unmountUnder } from '../support/mounts.ts';

const run = promisify(execFile);
const MIB = 1024 * 1024;
const SIZE = 64 * MIB;
const root = { skip: process.getuid?.() === 0 ? false : 'an ordinary user cannot mount' };

let dir: string;
before(async () => {
  dir = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-images-')));
});
after(async () => {
  await unmountUnder(dir);
  await fs.rm(dir, { recursive: true, force: true });
});

/** What the image takes on the host's file system (its blocks, not its apparent size). */
async function allocated(file: string): Promise<number> {
  return (await fs.stat(file)).blocks * 512;
}

/** The mount options of what is mounted at `point`, its own and its file system's. */
async function optionsAt(point: string): Promise<string[]> {
  const line = (await fs.readFile('/proc/self/mountinfo', 'utf8')).split('\n').find((l) => l.split(' ')[4] === point);
  assert.ok(line, `nothing is mounted at ${point}`);
  const [own, rest] = line.split(' - ');
  return [...own!.split(' ')[5]!.split(','), ...rest!.split(' ')[2]!.split(',')];
}

test(
  'a preallocated image takes its whole size on the host at once, is mounted without discard, and takes back what a trim gave away',
  root,
  async () => {
    const support = await probeDiskImages(path.join(dir, 'thick'), { preallocate: true });
    assert.ok(support.tools, support.reason);
    const images = createDiskImages(support.tools, path.join(dir, 'thick'));
    const mountPoint = path.join(dir, 'thick-mount');
    await images.attach('a-deployment', mountPoint, SIZE);
    const image = path.join(dir, 'thick', 'a-deployment.img');
    assert.ok((await allocated(image)) >= SIZE, `the image takes ${await allocated(image)} bytes of ${SIZE}`);
    assert.ok(!(await optionsAt(mountPoint)).includes('discard'));
    // What a host's fstrim does to its free blocks: given back to the host. The next mount (or a
    // restart's attach of a mounted one) takes them again.
    await run('fallocate', ['--punch-hole', '--offset', String(48 * MIB), '--length', String(16 * MIB), image]);
    assert.ok((await allocated(image)) < SIZE);
    await images.attach('a-deployment', mountPoint, SIZE);
    assert.ok((await allocated(image)) >= SIZE, `the image takes ${await allocated(image)} bytes of ${SIZE}`);
    await fs.writeFile(path.join(mountPoint, 'data'), Buffer.alloc(MIB, 1));
    await images.detach('a-deployment', mountPoint);
    assert.equal(await fs.lstat(image).catch(() => null), null);

    // A build's image the same way.
    const buildPoint = path.join(dir, 'thick-build');
    await images.builds.attach('a-revision', buildPoint, SIZE);
    assert.ok((await allocated(path.join(dir, 'thick', '.builds', 'a-revision.img'))) >= SIZE);
    assert.deepEqual(await images.builds.list(), ['a-revision']);
    await images.builds.detach('a-revision', buildPoint);
    assert.deepEqual(await images.builds.list(), []);
  },
);

test('a thin image (the default) takes only what it holds, and is mounted with discard', root, async () => {
  const support = await probeDiskImages(path.join(dir, 'thin'), { preallocate: false });
  assert.ok(support.tools, support.reason);
  const images = createDiskImages(support.tools, path.join(dir, 'thin'));
  const mountPoint = path.join(dir, 'thin-mount');
  await images.attach('a-deployment', mountPoint, SIZE);
  const image = path.join(dir, 'thin', 'a-deployment.img');
  assert.ok((await allocated(image)) < SIZE / 2, `the image takes ${await allocated(image)} bytes of ${SIZE}`);
  assert.ok((await optionsAt(mountPoint)).includes('discard'));
  await images.detach('a-deployment', mountPoint);
});

test('the start log says what each way can promise', root, async () => {
  const limiter = (preallocate: boolean) =>
    createDiskLimiter({
      config: {
        databaseUrl: 'postgres://db/slipway',
        dataDir: dir,
        disk: { appsDataDir: path.join(dir, 'apps'), appDiskMb: 8, buildDiskMb: 8, checkIntervalMs: 1000, preallocate },
      },
      logger: { info: () => undefined, warn: () => undefined, error: () => undefined },
    });
  assert.match(
    (await limiter(false)).description,
    /thin: each takes only what it holds, so together they can fill the host's file system .*SLIPWAY_APP_DISK_PREALLOCATE=1/,
  );
  assert.match(
    (await limiter(true)).description,
    /preallocated: each takes its whole size on the host's file system when it is made, so together they never take more than was free then/,
  );
});
