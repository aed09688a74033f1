/**
 * Removal of what an app could write, raced by the app itself. The service removes a deployment's data
 * directory when the deployment is deleted, and a revision's directory when its build fails or is
 * interrupted; it does so as its own user (root here). The attacker owns the tree being removed and
 * swaps its directories for links to a canary directory of the host, as fast as it can, ignoring
 * SIGTERM, so that a removal running while it still runs could be steered through a link.
 *
 * The rule under test (docs/data-plane.md): the service touches an app-writable tree only once every
 * process of the app (or build) is gone, and the removal never follows a link. What the old code did:
 * a deletion that came while a revision was starting tore the deployment down without waiting for the
 * revision's work to stop, so its data directory was removed while the app ran (the deletion was
 * confirmed with the app still alive; its processes outlived the DELETE by 39 s in the tracker's run),
 * and the removal itself followed swapped-in links.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { after, before } from 'node:test';
import {
  makeCanary,
  pathExists,
  processesMarked,
  startTestService,
  uploadApp,
  waitForRevision,
  watchRemovalRace,
  type Canary,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const CANARY_FILES = 101;

/**
 * The swapper: makes a tree under its first argument, then loops without end swapping its directories
 * for links to the second argument. SIGTERM is caught and ignored (the loop never yields, so the
 * handler never even runs); only SIGKILL or the end of its PID namespace stops it. Its third argument
 * marks it in the process table. As an app (PORT set) it first listens and then never answers, so
 * that each health check waits for its own time-out: the app chooses when the service looks again.
 */
const SWAPPER = String.raw`
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const [base, target] = process.argv.slice(2);
process.on('SIGTERM', () => {});
if (process.env.PORT) http.createServer(() => {}).listen(Number(process.env.PORT), process.env.HOST, swap);
else swap();
function swap() {
const names = Array.from({ length: 40 }, (_, i) => 'd' + i);
for (const name of names) {
  fs.mkdirSync(path.join(base, name, 'inner'), { recursive: true });
  for (let f = 0; f < 5; f++) fs.writeFileSync(path.join(base, name, 'inner', 'f' + f), 'x');
}
fs.writeFileSync(path.join(base, 'started'), String(process.pid));
for (;;) {
  for (const name of names) {
    const dir = path.join(base, name);
    try {
      fs.renameSync(dir, dir + '.away');
      fs.symlinkSync(target, dir);
      fs.unlinkSync(dir);
      fs.renameSync(dir + '.away', dir);
    } catch {
      // Keep going: whatever the service does to the tree, the loop goes on.
    }
  }
}
}
`;

let service: TestService;
let canary: Canary;

before(async () => {
  service = await startTestService(process.env.DEBUG_LOG ? { LOG_LEVEL: 'info' } : {});
  canary = await makeCanary(CANARY_FILES);
});
after(async () => {
  await service?.close();
  await canary?.remove();
});

async function deploy(name: string, slipway: Record<string, unknown>): Promise<{ id: string; revisionId: string }> {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({ name, private: true }),
    'swap.cjs': SWAPPER,
    'slipway.json': JSON.stringify({ health_check_path: '/healthz', ...slipway }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'TARGET_DIR', value: canary.dir }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id, revisionId: created.body.latest_revision_id };
}

test('a deployment deleted while its revision starts is gone only after every process of its app, and no link is followed', async () => {
  for (let round = 0; round < 3; round++) {
    const marker = `swapper-${randomBytes(6).toString('hex')}`;
    // The app never answers its health check: the revision stays DEPLOYING, its app running.
    const { id } = await deploy(`starting-${round}`, {
      install: null,
      build: null,
      start: `exec node swap.cjs "$SLIPWAY_DATA_DIR/tree" "$TARGET_DIR" ${marker}`,
    });
    const tree = path.join(service.dataDir, 'deployments', id, 'data', 'tree');
    await eventually('the app to start swapping', () => pathExists(path.join(tree, 'started')));

    const removed = await service.api('DELETE', `/v2/deployments/${id}`);
    assert.equal(removed.status, 204);
    // Watched from the DELETE on: any moment at which the app still runs and its tree is already being
    // removed (its first file gone) is the removal racing the app.
    const watch = watchRemovalRace(marker, path.join(tree, 'started'));
    await eventually(
      'the deletion to be confirmed',
      async () => (await service.api('GET', `/v2/deployments/${id}`)).status === 404,
    );
    assert.deepEqual((await watch.stop()).slice(0, 3), [], `round ${round}: the removal raced the app`);
    // Confirmed means done: nothing of the app runs, and its data went without following a link.
    assert.deepEqual(await processesMarked(marker), [], `round ${round}: the app still runs after its deletion`);
    await canary.assertIntact(`round ${round}`);
    assert.equal(await pathExists(path.join(service.dataDir, 'deployments', id)), false, 'its data directory is gone');
  }
});

test('an interrupted build that ignores SIGTERM is gone before its directory is removed, and no link is followed', async () => {
  const marker = `swapper-${randomBytes(6).toString('hex')}`;
  const { id, revisionId } = await deploy('interrupted-build', {
    install: null,
    build: `exec node swap.cjs tree "$TARGET_DIR" ${marker}`,
    start: 'node -e "require(\'node:http\').createServer((q, s) => s.end()).listen(process.env.PORT)"',
  });
  const dir = path.join(service.dataDir, 'revisions', revisionId);
  await eventually('the build to start swapping', () => pathExists(path.join(dir, 'app', 'src', 'tree', 'started')));
  const interrupted = await service.api('POST', `/v2/deployments/${id}/revisions/${revisionId}/interrupt`);
  assert.equal(interrupted.status, 200, JSON.stringify(interrupted.body));
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'INTERRUPTED');
  await eventually('its directory to be removed', async () => !(await pathExists(dir)));
  assert.deepEqual(await processesMarked(marker), [], 'the build still runs after its directory was removed');
  await canary.assertIntact('after the interrupted build');
});

test('a failed build whose command leaves a swapper behind has it gone before its directory is removed', async () => {
  const marker = `swapper-${randomBytes(6).toString('hex')}`;
  const { id, revisionId } = await deploy('failed-build', {
    install: null,
    build: `(node swap.cjs tree "$TARGET_DIR" ${marker} &) ; while [ ! -e tree/started ]; do sleep 0.05; done; exit 3`,
    start: 'node -e "0"',
  });
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));
  const dir = path.join(service.dataDir, 'revisions', revisionId);
  await eventually('its directory to be removed', async () => !(await pathExists(dir)));
  assert.deepEqual(await processesMarked(marker), [], 'what the build left behind still runs');
  await canary.assertIntact('after the failed build');
});
