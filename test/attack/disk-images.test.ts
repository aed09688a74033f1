/**
 * Attacker's test of the hard disk limit (issue 33, item 4): where the service runs as root and the host
 * can loop-mount, each deployment's data and home are a file system of their own, the size of its limit.
 *
 * An app that writes as fast as it can stops AT its limit (its writes fail with ENOSPC), never beyond,
 * while the service and PostgreSQL keep writing beside it; its data survives a redeploy and a restart
 * of the service (its file system still mounted, or mounted again); a deleted deployment leaves no mount
 * and no image behind, even while its app swaps its directories for links to a directory of the host;
 * and what a service that stopped in the middle left mounted is cleaned at the next start.
 *
 * What main did before: the limit was only measured every second, so an app writing as fast as it could
 * wrote hundreds of MiB past its 24 MiB before it was stopped, into the file system of PostgreSQL.
 *
 * As an ordinary user the service cannot mount: the limit is the measured one, and the start says why.
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
const LIMIT_MB = 24;
const MIB = 1024 * 1024;
const ROOT = process.getuid?.() === 0;
const hard = { skip: ROOT ? false : 'an ordinary user cannot mount: the measured mode is tested instead' };

/** Mount points of this machine under `dir` (from /proc/self/mountinfo, the service's own view). */
async function mountsUnder(dir: string): Promise<string[]> {
  const real = await fs.realpath(dir);
  const info = await fs.readFile('/proc/self/mountinfo', 'utf8');
  return info
    .split('\n')
    .map((line) => line.split(' ')[4] ?? '')
    .map((point) => point.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter((point) => point === real || point.startsWith(`${real}/`));
}

/** Writes 1 MiB at a time, as fast as it can, into `process.argv[2]` until 512 MiB or a write fails. */
const FILL = `
import fs from 'node:fs';
const chunk = Buffer.alloc(${MIB}, 7);
const fd = fs.openSync(process.argv[2], 'a');
let written = 0;
try { while (written < 512) { fs.writeSync(fd, chunk); written++; } console.log('wrote', written, 'MiB'); }
catch (e) { console.log('write failed after', written, 'MiB:', e.code); }
`;

const FILLER = `
import http from 'node:http';
import { spawn } from 'node:child_process';
http.createServer((req, res) => { res.writeHead(200); res.end('ok'); })
  .listen(Number(process.env.PORT), process.env.HOST, () => {
    setTimeout(() => spawn(process.execPath, ['fill.mjs', process.env.SLIPWAY_DATA_DIR + '/fill'], { stdio: 'inherit' }), 1000);
  });
`;

/** Notes each start in its data (the revision that started), and answers with all it noted. */
const REMEMBERS = `
import fs from 'node:fs';
import http from 'node:http';
const file = process.env.SLIPWAY_DATA_DIR + '/starts';
fs.appendFileSync(file, process.env.SLIPWAY_REVISION_ID + '\\n');
http.createServer((req, res) => { res.writeHead(200); res.end(fs.readFileSync(file, 'utf8')); })
  .listen(Number(process.env.PORT), process.env.HOST);
`;

/** Swaps directories of its data for links to the canary (named in a secret) for as long as it runs. */
const SWAPPER = `
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
const base = process.env.SLIPWAY_DATA_DIR;
const target = process.env.CANARY;
const names = Array.from({ length: 20 }, (_, i) => 'd' + i);
for (const name of names) {
  fs.mkdirSync(path.join(base, name, 'inner'), { recursive: true });
  fs.writeFileSync(path.join(base, name, 'inner', 'f'), 'x');
}
http.createServer((req, res) => res.end('ok')).listen(Number(process.env.PORT), process.env.HOST);
setInterval(() => {
  for (const name of names) {
    const dir = path.join(base, name);
    try { fs.renameSync(dir, dir + '.away'); fs.symlinkSync(target, dir); fs.unlinkSync(dir); fs.renameSync(dir + '.away', dir); } catch {}
  }
}, 2);
process.on('SIGTERM', () => undefined);
`;

let service: TestService;
let counter = 0;

before(async () => {
  service = await startTestService({
    SLIPWAY_APP_DISK_MB: String(LIMIT_MB),
    SLIPWAY_DISK_CHECK_SECONDS: '1',
  });
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
    name: `disk-image-${++counter}`,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    ...(secrets.length > 0 ? { secrets } : {}),
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id, revisionId: created.body.latest_revision_id };
}

const appsDir = () => path.join(service.dataDir, 'deployments');
const imageOf = (id: string) => path.join(appsDir(), '.images', `${id}.img`);

async function urlOf(id: string): Promise<string> {
  return (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
}

test('the start log says which disk limit holds, and why not the hard one', () => {
  if (ROOT) assert.match(service.worker?.isolation ?? '', /disk: loop-mounted/);
  else assert.match(service.worker?.isolation ?? '', /disk: measured .*does not run as root/);
});

describe('with a file system per deployment', () => {
  test(
    'an app writing as fast as it can stops at its limit, never beyond, and the service and PostgreSQL keep writing',
    hard,
    async () => {
      const app = await deploy({ ...oneFileApp(FILLER, { health_check_path: '/' }), 'fill.mjs': FILL });
      assert.equal((await waitForRevision(service, app.id, app.revisionId)).status, 'DEPLOYED');
      assert.deepEqual(await mountsUnder(appsDir()), [path.join(await fs.realpath(appsDir()), app.id)]);
      const full = await eventually('the disk_full event', async () => {
        const answer = await service.api('GET', `/v2/deployments/${app.id}/events?limit=100`);
        const events: { type: string; data: Record<string, unknown> }[] = answer.body.resources ?? answer.body;
        return events.find((e) => e.type === 'deployment.disk_full');
      });
      assert.match(String(full.data.message), /filled their file system of 24 MiB/);
      // The app's own words may reach its log after the data plane's event.
      let log: string[] = [];
      await eventually(
        'the app saying its write failed with ENOSPC',
        async () => {
          log = await revisionLog(service, app.id, app.revisionId, 'deploy');
          return log.some((line) => /write failed after \d+ MiB: ENOSPC/.test(line));
        },
        { describe: () => log.slice(-10).join('\n') },
      );
      const fill = await fs.stat(path.join(appsDir(), app.id, 'data', 'fill'));
      assert.ok(fill.size <= LIMIT_MB * MIB, `the app wrote ${fill.size} bytes, past its ${LIMIT_MB} MiB`);
      // Beside it, the service writes more than the app's whole limit, and PostgreSQL takes a new row.
      const beside = path.join(service.dataDir, 'beside-a-full-app');
      await fs.writeFile(beside, Buffer.alloc(2 * LIMIT_MB * MIB, 1));
      assert.equal((await fs.stat(beside)).size, 2 * LIMIT_MB * MIB);
      await fs.rm(beside);
      const created = await service.api('POST', '/v2/deployments', {
        name: 'after-full-image',
        source: 'internal_source',
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal((await service.api('GET', `/v2/deployments/${app.id}`)).body.status, 'UNKNOWN');
    },
  );

  test(
    "an app's data survives a redeploy and restarts of the service, mounted or not; its deletion while the service is down leaves no mount and no image",
    hard,
    async () => {
      const app = await deploy(oneFileApp(REMEMBERS, { health_check_path: '/' }));
      assert.equal((await waitForRevision(service, app.id, app.revisionId)).status, 'DEPLOYED');
      const root = path.join(await fs.realpath(appsDir()), app.id);
      const redeploy = await service.api('POST', `/v2/deployments/${app.id}/revisions/${app.revisionId}/redeploy`);
      assert.equal(redeploy.status, 201, JSON.stringify(redeploy.body));
      const second: string = redeploy.body.latest_revision_id;
      assert.equal((await waitForRevision(service, app.id, second)).status, 'DEPLOYED');
      const url = await urlOf(app.id);
      const starts = async () => (await requestApp(service, url, '/')).body.trim().split('\n');
      assert.deepEqual(await starts(), [app.revisionId, second]);

      // A restart: its file system is still mounted, and used as it is.
      await service.stopWorker();
      assert.ok((await mountsUnder(appsDir())).includes(root));
      await service.startWorker();
      await eventually('the app started again', async () => (await starts().catch(() => [])).length === 3);
      // A restart after its file system was unmounted (a reboot): mounted again, its data there.
      await service.stopWorker();
      await run('umount', [root]);
      assert.ok(!(await mountsUnder(appsDir())).includes(root));
      await service.startWorker();
      await eventually('the app started again on its remounted data', async () => {
        const seen = await starts().catch(() => []);
        return seen.length === 4 && seen;
      });
      assert.ok((await mountsUnder(appsDir())).includes(root));

      // Deleted while the worker is down: its next start tears it down, file system and image included.
      await service.stopWorker();
      const removed = await service.api('DELETE', `/v2/deployments/${app.id}`);
      assert.equal(removed.status, 204, JSON.stringify(removed.body));
      await service.startWorker();
      await eventually(
        'the deletion',
        async () => (await service.api('GET', `/v2/deployments/${app.id}`)).status === 404,
      );
      assert.ok(!(await mountsUnder(appsDir())).includes(root), 'its file system is still mounted');
      assert.equal(await fs.lstat(imageOf(app.id)).catch(() => null), null, 'its image is still there');
      assert.equal(await fs.lstat(root).catch(() => null), null, 'its directory is still there');
    },
  );

  test(
    'a deployment deleted while its app swaps its directories for links unmounts and removes only its own',
    hard,
    async () => {
      const canary = await makeCanary(51);
      try {
        const app = await deploy(oneFileApp(SWAPPER, { health_check_path: '/' }), [
          { name: 'CANARY', value: canary.dir },
        ]);
        assert.equal((await waitForRevision(service, app.id, app.revisionId)).status, 'DEPLOYED');
        await new Promise((resolve) => setTimeout(resolve, 500));
        const removed = await service.api('DELETE', `/v2/deployments/${app.id}`);
        assert.equal(removed.status, 204, JSON.stringify(removed.body));
        await eventually(
          'the deletion',
          async () => (await service.api('GET', `/v2/deployments/${app.id}`)).status === 404,
        );
        await canary.assertIntact('after the deletion');
        assert.deepEqual(
          (await mountsUnder(appsDir())).filter((point) => point.includes(app.id)),
          [],
        );
        assert.equal(await fs.lstat(imageOf(app.id)).catch(() => null), null);
      } finally {
        await canary.remove();
      }
    },
  );

  test('what a service that stopped in the middle left mounted is cleaned at its next start', hard, async () => {
    await service.stopWorker();
    // A probe's image, mounted, and an image whose formatting did not finish, as a crash leaves them.
    const images = path.join(appsDir(), '.images');
    const image = path.join(images, '.probe-crashed.img');
    const mountPoint = path.join(images, '.probe-crashed');
    await fs.writeFile(image, '');
    await fs.truncate(image, 16 * MIB);
    await run('mkfs.ext4', ['-q', '-F', image]);
    await fs.mkdir(mountPoint);
    await run('mount', ['-o', 'loop', image, mountPoint]);
    await fs.writeFile(path.join(images, 'a-deployment.img.partial'), 'half');
    assert.ok((await mountsUnder(images)).length > 0);
    await service.startWorker();
    assert.deepEqual(await mountsUnder(images), []);
    assert.deepEqual(
      (await fs.readdir(images)).filter((name) => name.startsWith('.probe-') || name.endsWith('.partial')),
      [],
    );
  });
});
