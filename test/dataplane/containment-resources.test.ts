/**
 * Containment of an app's resources (memory, processes), played by the probe app
 * (test/dataplane/containment-apps.ts), next to a neighbour app and the service's API that must not
 * notice: a memory hog is killed at its deployment's limit, reported and restarted; a fork bomb stops
 * at the process limit and leaves nothing behind once deleted; a revision that cannot fit its memory
 * limit fails with `out_of_memory` while the previous one keeps serving.
 *
 * What the old code did: nothing limited an app (no cgroup), so the hog's gigabyte was taken and it
 * answered, the bomb spawned all 2,000 children without one failure, and the revision that allocates
 * at start was DEPLOYED: every test here fails there at its first assertion on the attacker's report.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
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

/** The process limit of every app here (the resource spec has no field for it: the service's default). */
const PIDS = 200;
const MIB = 1024 * 1024;

interface App {
  id: string;
  revisionId: string;
  url: string;
}

let service: TestService;
let neighbour: App;

async function deploy(name: string, resourceSpec: Record<string, number> = {}): Promise<App> {
  const tarball = await uploadApp(service, probeApp());
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_config: { resource_spec: resourceSpec },
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url: string = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url;
  return { id: created.body.id, revisionId: revision.id, url };
}

before(async () => {
  service = await startTestService({ SLIPWAY_APP_PIDS: String(PIDS) });
  neighbour = await deploy('neighbour');
});
after(async () => {
  await service?.close();
});

/**
 * Limits need cgroups the service may write: root, or a delegated cgroup v2 subtree. An ordinary user
 * without one (CI's ordinary-user run, on cgroup v1) gets none, and the service says so at start
 * (docs/data-plane.md, "Host setups"): the tests of what limits do are then skipped, saying why.
 */
const limitsMissing = () => /resources: no resource limits/.test(service.worker?.isolation ?? '');
const NO_LIMITS = 'this service may make no cgroups here, so no limits are enforced (as its start log says)';

test('the start log says whether resource limits are enforced, and why not when they are not', () => {
  const isolation = service.worker?.isolation ?? '';
  if (limitsMissing()) assert.match(isolation, /resources: no resource limits: \S.{10,}/);
  else assert.match(isolation, /resources: .*cgroup/);
});

async function call(app: App, pathname: string): Promise<{ status: number; body: any }> {
  const answer = await requestApp(service, app.url, pathname).catch((error: Error) => ({
    status: 0,
    body: JSON.stringify({ error: error.message }),
  }));
  let body: any = answer.body;
  try {
    body = JSON.parse(answer.body);
  } catch {
    // Not JSON: an error page of the proxy.
  }
  return { status: answer.status, body };
}

/**
 * Calls the neighbour app and the service's API over and over until stopped; what failed is what the
 * attack did to them.
 */
function bystanders(): { stop(): Promise<{ served: number; failures: string[] }> } {
  let going = true;
  let served = 0;
  const failures: string[] = [];
  const loop = (async () => {
    while (going) {
      const [app, api] = await Promise.all([
        call(neighbour, '/healthz'),
        service.api('GET', '/v2/deployments').catch((error: Error) => ({ status: 0, body: error.message })),
      ]);
      if (app.status === 200) served++;
      else failures.push(`neighbour: ${app.status} ${JSON.stringify(app.body)}`);
      if (api.status !== 200) failures.push(`API: ${api.status}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  return {
    async stop() {
      going = false;
      await loop;
      return { served, failures };
    },
  };
}

async function events(deploymentId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
  const answer = await service.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body.resources;
}

/** Processes of the host whose command line starts with `marker` (their argv[0], or its last part). */
async function processesNamed(marker: string, options: { basename?: boolean } = {}): Promise<number[]> {
  const found: number[] = [];
  for (const pid of (await fs.readdir('/proc')).filter((p) => /^\d+$/.test(p))) {
    const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    const argv0 = cmdline.split('\0')[0]!;
    if ((options.basename ? argv0.split('/').at(-1) : argv0) === marker) found.push(Number(pid));
  }
  return found;
}

/** SCHED_OTHER, the ordinary CPU class (sched(7)). */
const SCHED_OTHER = 0;
/** The scheduling policy, nice value and parent of a process, from /proc/<pid>/stat (fields 41, 19 and 4). */
async function schedulingOf(pid: number): Promise<{ policy: number; nice: number; ppid: number }> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { policy: Number(fields[38]), nice: Number(fields[16]), ppid: Number(fields[1]) };
}

test("an app's network (slirp4netns) runs at the service's own priority: the traffic it carries is not starved by the host's other work", async () => {
  const ours = [];
  for (const pid of await processesNamed('slirp4netns', { basename: true })) {
    const scheduling = await schedulingOf(pid).catch(() => null);
    // This service's (it runs in this process); other test files' services run their own.
    if (scheduling?.ppid === process.pid) ours.push({ pid, ...scheduling });
  }
  assert.ok(ours.length > 0, 'the neighbour has its slirp4netns');
  const service = await schedulingOf(process.pid);
  assert.equal(service.policy, SCHED_OTHER);
  for (const found of ours) {
    assert.deepEqual(
      { policy: found.policy, nice: found.nice },
      { policy: service.policy, nice: service.nice },
      `slirp4netns ${found.pid}`,
    );
  }
});

test(
  'a memory hog is killed at its memory_limit_mb, reported as out_of_memory and restarted; then a revision that cannot fit fails DEPLOY_FAILED out_of_memory',
  { timeout: 10 * 60_000 },
  async (t) => {
    if (limitsMissing()) return t.skip(NO_LIMITS);
    const hog = await deploy('hog', { memory_limit_mb: 128 });
    // The honest part: well under its limit it allocates and answers.
    const small = await call(hog, '/hog?mb=32');
    assert.equal(small.status, 200, JSON.stringify(small.body));
    assert.equal(small.body.survived, true);

    const watch = bystanders();
    const big = await call(hog, '/hog?mb=1024');
    assert.ok(
      big.status !== 200 || big.body.survived !== true,
      `the app allocated ${big.body.mb} MiB with a limit of 128: ${JSON.stringify(big.body)}`,
    );
    const exited = await eventually('the out_of_memory exit event', async () =>
      (await events(hog.id)).find((e) => e.type === 'deployment.app_exited' && e.data.reason === 'out_of_memory'),
    );
    assert.equal(exited.data.memory_limit_bytes, 128 * MIB, JSON.stringify(exited));
    assert.equal(exited.data.revision_id, hog.revisionId);
    const log = await eventually('the out-of-memory line in the deploy log', async () => {
      const lines = await revisionLog(service, hog.id, hog.revisionId, 'deploy');
      return lines.find((line) => /out of memory/.test(line));
    });
    assert.match(log, /memory limit of 128 MiB/);
    // Restarted: it answers again at its URL, and was not taken for a crash loop.
    await eventually('the app to answer again', async () => (await call(hog, '/healthz')).status === 200);
    const { served, failures } = await watch.stop();
    assert.deepEqual(failures, [], 'the neighbour or the API failed while the hog ran');
    assert.ok(served > 0);
    assert.equal((await service.api('GET', `/v2/deployments/${hog.id}`)).body.status, 'READY');

    // A revision that allocates beyond its limit before it listens never serves.
    const patched = await service.api('PATCH', `/v2/deployments/${hog.id}`, {
      secrets: [{ name: 'HOG_AT_START_MB', value: '512' }],
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const failed = await waitForRevision(service, hog.id, patched.body.latest_revision_id);
    assert.equal(failed.status, 'DEPLOY_FAILED', JSON.stringify(failed));
    assert.equal(failed.failure_reason, 'out_of_memory', JSON.stringify(failed));
    assert.match(failed.failure_message, /128 MiB/);
    const deployment = (await service.api('GET', `/v2/deployments/${hog.id}`)).body;
    assert.equal(deployment.active_revision_id, hog.revisionId);
    assert.equal((await call(hog, '/healthz')).status, 200, 'the previous revision keeps serving');
  },
);

test(
  'a fork bomb stops at the process limit without troubling the neighbour or the API, and nothing of it outlives its deployment',
  { timeout: 10 * 60_000 },
  async (t) => {
    if (limitsMissing()) return t.skip(NO_LIMITS);
    const bomber = await deploy('bomber');
    const marker = `slipway-bomb-${randomBytes(6).toString('hex')}`;
    const watch = bystanders();
    const bomb = await call(bomber, `/bomb?marker=${marker}&max=2000`);
    assert.equal(bomb.status, 200, JSON.stringify(bomb.body));
    assert.ok(bomb.body.errors.EAGAIN > 0, `spawning never failed: ${JSON.stringify(bomb.body)}`);
    assert.ok(bomb.body.spawned > 0 && bomb.body.spawned < PIDS, JSON.stringify(bomb.body));
    // On the host: its children are there (it really spawned them), no more than the limit.
    const running = await processesNamed(marker);
    assert.ok(running.length > 0 && running.length <= PIDS, `${running.length} of its children run on the host`);
    // The app itself still answers at its limit, as do its neighbour and the API.
    assert.equal((await call(bomber, '/healthz')).status, 200);
    const { served, failures } = await watch.stop();
    assert.deepEqual(failures, [], 'the neighbour or the API failed during the fork bomb');
    assert.ok(served > 0);

    const removed = await service.api('DELETE', `/v2/deployments/${bomber.id}`);
    assert.equal(removed.status, 204);
    await eventually(
      'the deployment to be gone',
      async () => (await service.api('GET', `/v2/deployments/${bomber.id}`)).status === 404,
    );
    const left = await eventually('its children to be gone', async () =>
      (await processesNamed(marker)).length === 0 ? [] : null,
    ).catch(async () => processesNamed(marker));
    assert.deepEqual(left, [], 'children of the deleted app still run');
  },
);

/**
 * /tmp and HOME are memory file systems (tmpfs): what an app writes there is memory, and counts against
 * its memory limit like its own allocations. Old code: /tmp was a tmpfs of the machine's memory without
 * any limit (and HOME was on disk), so a gigabyte was written both times.
 */
test(
  'an app filling its /tmp and HOME is held to its memory limit, and its neighbour does not notice',
  { timeout: 10 * 60_000 },
  async (t) => {
    if (limitsMissing()) return t.skip(NO_LIMITS);
    const filler = await deploy('filler', { memory_limit_mb: 128 });
    const home = (await call(filler, `/sh?cmd=${encodeURIComponent('printf %s "$HOME"')}`)).body.output;
    assert.equal(home, '/home/app/home');
    for (const dir of ['/tmp', home]) {
      // The honest part: a little fits.
      const small = await call(filler, `/fill?dir=${encodeURIComponent(dir)}&mb=32`);
      assert.equal(small.status, 200, JSON.stringify(small.body));
      assert.deepEqual(small.body, { written: 32, error: null });

      const watch = bystanders();
      const big = await call(filler, `/fill?dir=${encodeURIComponent(dir)}&mb=1024`);
      t.diagnostic(`filling ${dir}: ${big.status} ${JSON.stringify(big.body)}`);
      // Either the write was refused or the instance was killed; a gigabyte never landed.
      assert.ok(
        big.status !== 200 || (big.body.error !== null && big.body.written <= 128),
        `the app wrote ${big.body.written} MiB to ${dir} with a limit of 128: ${JSON.stringify(big.body)}`,
      );
      await eventually('the app to answer again', async () => (await call(filler, '/healthz')).status === 200);
      const { served, failures } = await watch.stop();
      assert.deepEqual(failures, [], `the neighbour or the API failed while the app filled ${dir}`);
      assert.ok(served > 0);
    }
  },
);
