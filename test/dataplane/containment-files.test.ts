/**
 * Containment of an app's files, played by a hostile app (test/dataplane/containment-apps.ts): it
 * knows where the service keeps its data directory, and from its start loops as fast as it can swapping
 * directories of its own source (and of its HOME) for symbolic links to it, and writing into its source,
 * while its revision is redeployed again and again; it also tries nested namespaces to unmount what
 * hides that directory. A second test does the same in SLIPWAY_DATA_DIR, the one writable place the
 * service prepares (as root) at every start.
 *
 * What the old code did: an app instance ran with its whole revision directory bound writable
 * (`--bind <revisions/<id>/app> /home/app`), and a redeploy copied that live directory with `fs.cp` as
 * root and then chowned the copy to the app's user. The app could swap a directory of its source for a
 * link to the service's data directory in the middle of the copy, and the copy (following the link as
 * root) put `encryption.key`, `postgres-password` and the PostgreSQL cluster into the new revision,
 * readable by the app. This test would have failed at once there: `srcWritable` was true (the renames
 * and writes in its source succeeded), and SLIPWAY_DATA_DIR did not exist.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { probeApp } from './containment-apps.ts';
import {
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const REDEPLOYS = 8;
/** Errors a write into a read-only snapshot may give; anything else means the write got further. */
const DENIED = new Set(['EROFS', 'EACCES', 'EPERM']);

let service: TestService;
/** What the service keeps in its data directory in production, planted here: name → content. */
const planted: Record<string, string> = {
  'encryption.key': `${randomBytes(32).toString('hex')}\n`,
  'postgres-password': randomBytes(24).toString('hex'),
  'first-admin-key': `slw_${randomBytes(24).toString('hex')}\n`,
  'postgres/PG_VERSION': `17 ${randomBytes(8).toString('hex')}\n`,
  'postgres/base/1/16384': randomBytes(64).toString('hex'),
};
const sha = (content: string | Buffer) => createHash('sha256').update(content).digest('hex');
const plantedHashes = new Set(Object.values(planted).map(sha));
const plantedNames = new Set(Object.keys(planted).map((p) => path.basename(p)));

before(async () => {
  service = await startTestService();
  for (const [name, content] of Object.entries(planted)) {
    const file = path.join(service.dataDir, name);
    await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    await fs.writeFile(file, content, { mode: 0o600 });
  }
});
after(async () => {
  await service?.close();
});

async function call(url: string, pathname: string): Promise<any> {
  const answer = await requestApp(service, url, pathname);
  assert.equal(answer.status, 200, `${pathname}: ${answer.status} ${answer.body}`);
  return JSON.parse(answer.body);
}

/** Waits until the stable URL serves `revisionId` and its attack loop has run `rounds` rounds. */
function statusOf(url: string, revisionId: string, rounds: number): Promise<any> {
  return eventually(`revision ${revisionId} to serve and attack`, async () => {
    const answer = await requestApp(service, url, '/status').catch(() => null);
    if (answer?.status !== 200) return null;
    const status = JSON.parse(answer.body);
    return status.revision === revisionId && status.attack.rounds >= rounds ? status : null;
  });
}

/** What the attacker could do to its own source: nothing, and only for want of permission. */
function assertSourceReadOnly(status: any): void {
  const detail = JSON.stringify(status.attack);
  assert.equal(status.srcWritable, false, `the app changed its own source: ${detail}`);
  assert.equal(status.attack.src.renamed, 0, detail);
  assert.equal(status.attack.srcWrites.ok, 0, detail);
  const codes = [...Object.keys(status.attack.src.errors), ...Object.keys(status.attack.srcWrites.errors)];
  assert.ok(codes.length > 0, `the attack loop never tried: ${detail}`);
  for (const code of codes) assert.ok(DENIED.has(code), `a write into the source failed with ${code}: ${detail}`);
}

/** The app's own search of everything it can reach: no file of the service's, by name or by content. */
function assertFoundNothing(found: any, revisionId: string): void {
  assert.deepEqual(found.nameHits, [], `revision ${revisionId} sees files named like the service's`);
  const leaks = Object.entries(found.files as Record<string, string>).filter(([, hash]) => plantedHashes.has(hash));
  assert.deepEqual(leaks, [], `revision ${revisionId} can read the service's files`);
  for (const [where, what] of Object.entries(found.direct as Record<string, string>)) {
    assert.ok(!what.startsWith('read:'), `revision ${revisionId} read ${where}`);
    assert.ok(!/^listed:./.test(what), `revision ${revisionId} listed ${where}: ${what}`);
  }
  assert.ok(found.entries > 100, `the search walked ${found.entries} entries only`);
}

/** Every file and link under `dir` on the host, without following links. */
async function hostTree(dir: string): Promise<{ file: string; hash: string | null }[]> {
  const out: { file: string; hash: string | null }[] = [];
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    const file = path.join(entry.parentPath, entry.name);
    out.push({ file, hash: entry.isFile() ? sha(await fs.readFile(file).catch(() => '')) : null });
  }
  return out;
}

async function assertPlantedIntact(): Promise<void> {
  for (const [name, content] of Object.entries(planted)) {
    const file = path.join(service.dataDir, name);
    const stat = await fs.lstat(file);
    assert.ok(stat.isFile(), `${name} is still a file`);
    assert.equal(await fs.readFile(file, 'utf8'), content, `${name} is unchanged`);
    assert.equal(stat.uid, process.getuid!(), `${name} is still the service's`);
    assert.equal(stat.mode & 0o777, 0o600, `${name} keeps its mode`);
  }
}

test(
  "an app racing the redeploys of its own revision never gets the service's files, and its source stays read-only",
  { timeout: 10 * 60_000 },
  async () => {
    const tarball = await uploadApp(service, probeApp({ slipway: { env: { ATTACK: '1' } }, treeDirs: 100 }));
    const created = await service.api('POST', '/v2/deployments', {
      name: 'racer',
      source: 'internal_source',
      source_config: {},
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
      // The attacker knows where the service keeps its data.
      secrets: [{ name: 'TARGET_DIR', value: service.dataDir }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const deploymentId: string = created.body.id;
    const first = await waitForRevision(service, deploymentId, created.body.latest_revision_id);
    assert.equal(first.status, 'DEPLOYED', JSON.stringify(first));
    const url: string = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config.custom_url;

    // The honest part: HOME, /tmp and SLIPWAY_DATA_DIR are writable; the source is not.
    let status = await statusOf(url, first.id, 20);
    assert.equal(status.startup.home, 'ok', JSON.stringify(status.startup));
    assert.equal(status.startup.tmp, 'ok', JSON.stringify(status.startup));
    assert.equal(status.startup.data, 'ok', JSON.stringify(status.startup));
    assertSourceReadOnly(status);
    // Its HOME is its own to play in: the swaps there succeed (they are harmless).
    assert.ok(status.attack.home.linked > 0, JSON.stringify(status.attack.home));
    assertFoundNothing(await call(url, '/search'), first.id);

    // Nested namespaces (bubblewrap lets the app make them): unmount what hides the service's data
    // directory, make its source writable again, or look through another process's root.
    const target = service.dataDir;
    for (const cmd of [
      `unshare -Urm sh -c 'umount -l ${target}; cat ${target}/encryption.key; ls -la ${target}'`,
      `unshare -Urm sh -c 'umount -l /home/app/src; ls -la /home/app/src'`,
      `unshare -Urm sh -c 'mount -o remount,rw,bind /home/app/src; echo pwned > /home/app/src/pwned; ls /home/app/src'`,
      `cat /proc/*/root${target}/encryption.key; ls /proc/*/root${target}`,
    ]) {
      const ran = await call(url, `/sh?cmd=${encodeURIComponent(cmd)}`);
      for (const [name, content] of Object.entries(planted)) {
        assert.ok(!ran.output.includes(content.trim()), `\`${cmd}\` printed ${name}: ${ran.output}`);
      }
      assert.doesNotMatch(ran.output, /postgres-password|first-admin-key|PG_VERSION/, `${cmd}: ${ran.output}`);
    }
    const src = await call(url, `/sh?cmd=${encodeURIComponent('ls -a /home/app/src')}`);
    assert.doesNotMatch(src.output, /pwned/);

    let active: string = first.id;
    for (let i = 1; i <= REDEPLOYS; i++) {
      // The running revision attacks while its build output is copied for the next one.
      const before = await statusOf(url, active, status.attack.rounds + 5);
      assertSourceReadOnly(before);
      const redeploy = await service.api('POST', `/v2/deployments/${deploymentId}/revisions/${active}/redeploy`);
      assert.equal(redeploy.status, 201, JSON.stringify(redeploy.body));
      const next = await waitForRevision(service, deploymentId, redeploy.body.latest_revision_id);
      assert.equal(next.status, 'DEPLOYED', JSON.stringify(next));
      // The copy really happened (no rebuild from the upload): that copy is what the attacker races.
      const buildLog = await revisionLog(service, deploymentId, next.id, 'build');
      assert.ok(
        buildLog.some((line) => line.includes(`Reusing the build output of revision ${active}`)),
        buildLog.join('\n'),
      );

      status = await statusOf(url, next.id, 5);
      assertSourceReadOnly(status);
      assert.equal(status.startup.data, 'ok', JSON.stringify(status.startup));
      // What the first revision wrote to SLIPWAY_DATA_DIR is there for every later one.
      assert.ok(status.startup.dataSeen.includes(`from-${first.id}`), JSON.stringify(status.startup.dataSeen));
      assert.ok(status.startup.dataSeen.includes(`from-${active}`), JSON.stringify(status.startup.dataSeen));
      // A fresh HOME: nothing of the previous instance's is in it.
      assertFoundNothing(await call(url, '/search'), next.id);
      active = next.id;
    }

    // On the host: no copy of the service's files anywhere in the apps' directories, and its files are
    // as they were (no chown, copy or delete of the service's followed the attacker's links).
    for (const dir of ['revisions', 'deployments']) {
      for (const { file, hash } of await hostTree(path.join(service.dataDir, dir))) {
        assert.ok(!plantedNames.has(path.basename(file)), `${file} is named like a file of the service's`);
        assert.ok(hash === null || !plantedHashes.has(hash), `${file} holds a file of the service's`);
      }
    }
    await assertPlantedIntact();

    const removed = await service.api('DELETE', `/v2/deployments/${deploymentId}`);
    assert.equal(removed.status, 204);
    await eventually(
      'the deployment to be gone',
      async () => (await service.api('GET', `/v2/deployments/${deploymentId}`)).status === 404,
    );
    // Its SLIPWAY_DATA_DIR held links into the service's data directory: the delete did not follow them.
    await assertPlantedIntact();
    // Nothing of it is left: no directory, and (where each deployment has a file system of its own) no image.
    const apps = path.join(service.dataDir, 'deployments');
    assert.deepEqual(
      (await fs.readdir(apps).catch(() => [])).filter((name) => name !== '.images'),
      [],
    );
    const images = path.join(apps, '.images');
    assert.deepEqual(
      (await fs.readdir(images).catch(() => [])).filter((name) => name !== '.builds'),
      [],
    );
    // Nor a build's (builds as root write on an image of their own, removed when the build ends).
    assert.deepEqual(await fs.readdir(path.join(images, '.builds')).catch(() => []), []);
  },
);

/**
 * SLIPWAY_DATA_DIR is the one place an app writes that outlives its instance, and the service prepares it
 * (as root) at every start, while the previous revision still runs and writes it. Here the running app
 * swaps directories of it for links to the service's data directory as fast as it can, and leaves links
 * there for good. A redeploy must still work (any app with a cache or a SQLite file changes that
 * directory all the time), and nothing the service does to it may follow a link: the service's files
 * stay its own.
 *
 * What the old code did: there was no SLIPWAY_DATA_DIR (`startup.data` is 'unset'), so this fails at its
 * first assertion.
 */
test(
  'an app churning its SLIPWAY_DATA_DIR with links to the service files can still be redeployed, and no chown follows them',
  { timeout: 10 * 60_000 },
  async () => {
    const tarball = await uploadApp(service, probeApp({ slipway: { env: { ATTACK_DATA: '1', DATA_DIRS: '400' } } }));
    const created = await service.api('POST', '/v2/deployments', {
      name: 'data-churner',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
      secrets: [{ name: 'TARGET_DIR', value: service.dataDir }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const deploymentId: string = created.body.id;
    const first = await waitForRevision(service, deploymentId, created.body.latest_revision_id);
    assert.equal(first.status, 'DEPLOYED', JSON.stringify(first));
    const url: string = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config.custom_url;
    let status = await statusOf(url, first.id, 20);
    assert.equal(status.startup.data, 'ok', JSON.stringify(status.startup));
    assert.ok(status.attack.data.linked > 0, JSON.stringify(status.attack.data));

    let active: string = first.id;
    for (let i = 1; i <= 10; i++) {
      await statusOf(url, active, status.attack.rounds + 5);
      const redeploy = await service.api('POST', `/v2/deployments/${deploymentId}/revisions/${active}/redeploy`);
      assert.equal(redeploy.status, 201, JSON.stringify(redeploy.body));
      const next = await waitForRevision(service, deploymentId, redeploy.body.latest_revision_id);
      assert.equal(next.status, 'DEPLOYED', `redeploy ${i} of ${active}: ${JSON.stringify(next)}`);
      status = await statusOf(url, next.id, 5);
      assert.ok(status.startup.dataSeen.includes(`from-${first.id}`), JSON.stringify(status.startup.dataSeen));
      assertFoundNothing(await call(url, '/search'), next.id);
      await assertPlantedIntact();
      active = next.id;
    }

    const removed = await service.api('DELETE', `/v2/deployments/${deploymentId}`);
    assert.equal(removed.status, 204);
    await eventually(
      'the deployment to be gone',
      async () => (await service.api('GET', `/v2/deployments/${deploymentId}`)).status === 404,
    );
    await assertPlantedIntact();
  },
);
