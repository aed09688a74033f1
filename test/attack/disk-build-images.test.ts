/**
 * Attacker's test of a build's disk (issue 33, item 4): where the service runs as root and the host can
 * loop-mount, each build writes a file system of its own, an image of the build limit
 * (SLIPWAY_BUILD_DISK_MB) mounted at its app directory. Its finished output is copied off the image
 * into the revision's directory, sealed, and the image unmounted and removed.
 *
 * A build that writes as fast as it can gets ENOSPC at its limit and fails saying which limit; a build
 * that swaps its directories for links to a directory of the host while its deployment is deleted, or
 * as it fails, leaves that directory intact; a failed, interrupted or crashed build leaves no mount and
 * no image; a link in a finished build's output is copied as a link, never followed.
 *
 * What main did before: a build wrote a plain directory on the host's file system, measured every few
 * seconds, so a build writing as fast as it could went on well past its limit before it was stopped
 * (no ENOSPC), into the file system of PostgreSQL.
 *
 * As an ordinary user the service cannot mount: builds are measured, and the start log says why.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe } from 'node:test';
import { test } from '../support/limited-test.ts';
import {
  makeCanary,
  oneFileApp,
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { eventually } from '../support/wait.ts';

const run = promisify(execFile);
const LIMIT_MB = 32;
const MIB = 1024 * 1024;
const ROOT = process.getuid?.() === 0;
const hard = { skip: ROOT ? false : 'an ordinary user cannot mount: builds are measured (test/attack/disk-limits)' };

/** Mount points of this machine under `dir` (from /proc/self/mountinfo). */
async function mountsUnder(dir: string): Promise<string[]> {
  const real = await fs.realpath(dir);
  const info = await fs.readFile('/proc/self/mountinfo', 'utf8');
  return info
    .split('\n')
    .map((line) => line.split(' ')[4] ?? '')
    .map((point) => point.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter((point) => point === real || point.startsWith(`${real}/`));
}

/** Writes 1 MiB at a time, as fast as it can, until 256 MiB; a failed write fails the command. */
const FILL = `
import fs from 'node:fs';
const chunk = Buffer.alloc(${MIB}, 7);
const fd = fs.openSync(process.argv[2], 'a');
let written = 0;
try { while (written < 256) { fs.writeSync(fd, chunk); written++; } console.log('wrote', written, 'MiB'); }
catch (e) { console.log('write failed after', written, 'MiB:', e.code); process.exit(1); }
`;

/**
 * Makes directories with files in its working directory and swaps them for links to the canary (named in
 * a secret) for as long as it runs; with an argument, it stops the build that many ms later, failing it.
 */
const SWAP = `
import fs from 'node:fs';
import path from 'node:path';
const target = process.env.CANARY;
const names = Array.from({ length: 20 }, (_, i) => 'd' + i);
for (const name of names) {
  fs.mkdirSync(path.join(name, 'inner'), { recursive: true });
  fs.writeFileSync(path.join(name, 'inner', 'f'), 'x');
}
console.log('swapping');
setInterval(() => {
  for (const name of names) {
    try { fs.renameSync(name, name + '.away'); fs.symlinkSync(target, name); fs.unlinkSync(name); fs.renameSync(name + '.away', name); } catch {}
  }
}, 2);
if (process.argv[2]) setTimeout(() => process.exit(1), Number(process.argv[2]));
process.on('SIGTERM', () => undefined);
`;

const SERVER = `
import http from 'node:http';
import fs from 'node:fs';
http.createServer((req, res) => { res.writeHead(200); res.end(fs.readFileSync('built.txt', 'utf8')); })
  .listen(Number(process.env.PORT), process.env.HOST);
`;

let service: TestService;
let counter = 0;

before(async () => {
  service = await startTestService({ SLIPWAY_BUILD_DISK_MB: String(LIMIT_MB), SLIPWAY_DISK_CHECK_SECONDS: '1' });
});
after(async () => {
  await service?.close();
});

async function deploy(
  files: Record<string, string>,
  secrets: { name: string; value: string }[] = [],
): Promise<{ id: string; revisionId: string }> {
  const tarball = await uploadApp(service, files);
  const created = await service.api('POST', '/v2/deployments', {
    name: `build-image-${++counter}`,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    ...(secrets.length > 0 ? { secrets } : {}),
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id, revisionId: created.body.latest_revision_id };
}

const buildImages = () => path.join(service.dataDir, 'deployments', '.images', '.builds');
const appDirOf = (revisionId: string) => path.join(service.dataDir, 'revisions', revisionId, 'app');

/** The build of `revisionId` runs on its own file system: its app directory is a mount point. */
async function buildMounted(revisionId: string): Promise<boolean> {
  const mounts = await mountsUnder(service.dataDir);
  const appDir = await fs.realpath(appDirOf(revisionId)).catch(() => null);
  return appDir !== null && mounts.includes(appDir);
}

/** Nothing of the build of `revisionId` is left mounted, and its image is gone. */
async function assertNothingLeft(revisionId: string): Promise<void> {
  const mounts = (await mountsUnder(service.dataDir)).filter((point) => point.includes(revisionId));
  assert.deepEqual(mounts, [], 'a mount of the build is left');
  const images = await fs.readdir(buildImages()).catch(() => []);
  assert.deepEqual(
    images.filter((name) => name.includes(revisionId)),
    [],
    'an image of the build is left',
  );
}

test('the start log says how builds are limited, and why not on a file system of their own', () => {
  if (ROOT) assert.match(service.worker?.isolation ?? '', /each build on a file system of 32 MiB of its own/);
  else assert.match(service.worker?.isolation ?? '', /builds measured every 1 s, 32 MiB per build/);
  if (!ROOT) assert.match(service.worker?.isolation ?? '', /does not run as root/);
});

describe('with a file system per build', () => {
  test('a build writing as fast as it can gets ENOSPC at its limit and fails naming the limit', hard, async () => {
    const build = await deploy({
      ...oneFileApp(`console.log('never started')`, { build: 'node fill.mjs ./fill' }),
      'fill.mjs': FILL,
    });
    const revision = await waitForRevision(service, build.id, build.revisionId);
    assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));
    assert.equal(revision.failure_reason, 'disk_limit', JSON.stringify(revision));
    assert.match(revision.failure_message, /file system of 32 MiB/);
    assert.match(revision.failure_message, /SLIPWAY_BUILD_DISK_MB/);
    const log = await revisionLog(service, build.id, build.revisionId, 'build');
    const failed = log.map((line) => /write failed after (\d+) MiB: ENOSPC/.exec(line)).find(Boolean);
    assert.ok(failed, log.slice(-10).join('\n'));
    assert.ok(Number(failed[1]) <= LIMIT_MB, `the build wrote ${failed[1]} MiB past its ${LIMIT_MB} MiB`);
    assert.ok(log.some((line) => /Build failed: The build filled its file system/.test(line)));
    await assertNothingLeft(build.revisionId);
    // The service and PostgreSQL still take writes.
    const created = await service.api('POST', '/v2/deployments', {
      name: 'after-full-build',
      source: 'internal_source',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  });

  test('a finished build is copied off its image: links stay links, the canary and its owner stay', hard, async () => {
    const canary = await makeCanary(11);
    try {
      const before = await fs.stat(canary.dir);
      const app = await deploy(
        oneFileApp(SERVER, {
          health_check_path: '/',
          build:
            'echo built > built.txt && ln -s "$CANARY" outside && mkdir -p deep/er && ln -s "$CANARY" deep/er/link',
        }),
        [{ name: 'CANARY', value: canary.dir }],
      );
      assert.equal((await waitForRevision(service, app.id, app.revisionId)).status, 'DEPLOYED');
      const url = (await service.api('GET', `/v2/deployments/${app.id}`)).body.source_config.custom_url;
      assert.equal((await requestApp(service, url, '/')).body.trim(), 'built');
      const src = path.join(appDirOf(app.revisionId), 'src');
      assert.ok((await fs.lstat(path.join(src, 'outside'))).isSymbolicLink());
      assert.ok((await fs.lstat(path.join(src, 'deep', 'er', 'link'))).isSymbolicLink());
      // Sealed: the service's and read-only, on the host's file system (no mount left).
      const built = await fs.stat(path.join(src, 'built.txt'));
      assert.equal(built.uid, 0);
      assert.equal(built.mode & 0o222, 0);
      await assertNothingLeft(app.revisionId);
      await canary.assertIntact('after the build');
      const after = await fs.stat(canary.dir);
      assert.deepEqual([after.uid, after.gid, after.mode], [before.uid, before.gid, before.mode]);
    } finally {
      await canary.remove();
    }
  });

  test(
    'a build swapping its directories for links while its deployment is deleted leaves the canary intact',
    hard,
    async () => {
      const canary = await makeCanary(51);
      try {
        const build = await deploy(
          { ...oneFileApp(`console.log('never started')`, { build: 'node swap.mjs' }), 'swap.mjs': SWAP },
          [{ name: 'CANARY', value: canary.dir }],
        );
        await eventually('the build on its own file system', () => buildMounted(build.revisionId));
        await eventually('the swapping', async () =>
          (await revisionLog(service, build.id, build.revisionId, 'build')).includes('swapping'),
        );
        const removed = await service.api('DELETE', `/v2/deployments/${build.id}`);
        assert.equal(removed.status, 204, JSON.stringify(removed.body));
        await eventually(
          'the deletion',
          async () => (await service.api('GET', `/v2/deployments/${build.id}`)).status === 404,
        );
        await canary.assertIntact('after the deletion');
        await assertNothingLeft(build.revisionId);
      } finally {
        await canary.remove();
      }
    },
  );

  test('a build that fails while it swaps leaves the canary intact, and no mount and no image', hard, async () => {
    const canary = await makeCanary(51);
    try {
      const build = await deploy(
        { ...oneFileApp(`console.log('never started')`, { build: 'node swap.mjs 1500' }), 'swap.mjs': SWAP },
        [{ name: 'CANARY', value: canary.dir }],
      );
      await eventually('the build on its own file system', () => buildMounted(build.revisionId));
      const revision = await waitForRevision(service, build.id, build.revisionId);
      assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));
      assert.equal(revision.failure_reason, 'build_command_failed', JSON.stringify(revision));
      await canary.assertIntact('after the failed build');
      await assertNothingLeft(build.revisionId);
    } finally {
      await canary.remove();
    }
  });

  test(
    'a build interrupted by the service stopping, or left by one that crashed, leaves no mount and no image',
    hard,
    async () => {
      const build = await deploy(
        oneFileApp(`console.log('never started')`, { build: 'node -e "setTimeout(() => {}, 600000)"' }),
      );
      await eventually('the build on its own file system', () => buildMounted(build.revisionId));
      await service.stopWorker();
      await assertNothingLeft(build.revisionId);

      // What a crash leaves: a build's image, mounted at its revision's app directory.
      const crashed = 'crashed-build-revision';
      const image = path.join(buildImages(), `${crashed}.img`);
      const mountPoint = appDirOf(crashed);
      await fs.mkdir(buildImages(), { recursive: true });
      await fs.writeFile(image, '');
      await fs.truncate(image, 16 * MIB);
      await run('mkfs.ext4', ['-q', '-F', image]);
      await fs.mkdir(mountPoint, { recursive: true });
      await run('mount', ['-o', 'loop', image, mountPoint]);
      assert.ok(await buildMounted(crashed));
      await service.startWorker();
      await assertNothingLeft(crashed);
      await fs.rm(path.dirname(mountPoint), { recursive: true, force: true });
      const removed = await service.api('DELETE', `/v2/deployments/${build.id}`);
      assert.equal(removed.status, 204, JSON.stringify(removed.body));
      await eventually(
        'the deletion',
        async () => (await service.api('GET', `/v2/deployments/${build.id}`)).status === 404,
      );
      await assertNothingLeft(build.revisionId);
    },
  );
});
