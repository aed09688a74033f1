/**
 * Both data planes end on the revision the one desired-state rule names (src/domain/desired-state.ts):
 * for the same sequence of pushes (some quick, one held in the middle of its work, a failure in
 * between), the own worker (src/dataplane/local-worker.ts, its real claims and reports) and a listener
 * that follows its desired state end with the same revision active, and that revision is the rule's
 * target on both. The own plane's runtime is a stand-in whose builds succeed, fail or hold as the test
 * says (building and running apps is what other tests cover); the listener is a script that reads its
 * desired state and reports, as the listener agent (packages/listener/) does.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import type { BuildRecord } from '../../src/dataplane/revision-build.ts';
import { RevisionFailure } from '../../src/dataplane/revision-build.ts';
import type { LocalRuntime } from '../../src/dataplane/local-runtime-types.ts';
import { startWorker } from '../../src/dataplane/local-worker.ts';
import { targetRevisionId } from '../../src/domain/desired-state.ts';
import { isFinalRevisionStatus, type RevisionStatus } from '../../src/domain/states.ts';
import type { Worker } from '../../src/domain/data-plane.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import type { LeaseOwner } from '../../src/store/work-leases.ts';
import { client, createTestApp, listen, registerListener, type TestApp } from '../support/harness.ts';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';
import { uploadApp } from './data-plane-harness.ts';

/** What becomes of a pushed revision's work: done, failed, or held until a newer push or the end. */
type Plan = 'ok' | 'fail' | 'hold';

let t: TestApp;
let worker: Worker;
let tarball: string;
/** The plan of each revision, by id, for both planes. */
const plans = new Map<string, Plan>();
/** Builds held by the stand-in runtime, by revision id: release one to let it succeed. */
const held = new Map<string, () => void>();

/** The own plane's runtime: a build does what its revision's plan says; a deploy commits at once. */
function standInRuntime(): LocalRuntime {
  const running = new Set<string>();
  return {
    isolation: 'stand-in',
    async build(job, hooks, signal) {
      await hooks.building();
      // The test sets the plan once its push is answered, which may be after the worker took it up.
      const plan = await eventually(`the plan of revision ${job.revisionId}`, () => plans.get(job.revisionId));
      if (plan === 'fail') throw new RevisionFailure('BUILD_FAILED', 'build_command_failed', 'The build failed.');
      if (plan === 'hold') {
        await new Promise<void>((resolve, reject) => {
          held.set(job.revisionId, resolve);
          signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
        }).finally(() => held.delete(job.revisionId));
      }
      return { appConfig: {}, builtAt: new Date().toISOString() } as unknown as BuildRecord;
    },
    async deploy(job, signal, commit) {
      signal.throwIfAborted();
      await commit(`http://${job.revisionId}.apps.test`);
      running.add(job.deployment.id);
    },
    resume: async () => undefined,
    serveEndpoints: async () => undefined,
    running: () => [...running],
    appStats: async () => [],
    rescale: async () => undefined,
    check: async () => undefined,
    stop: async (id) => void running.delete(id),
    teardown: async () => undefined,
    removeRevisionFiles: async () => undefined,
    removeUpload: async () => undefined,
    close: async () => undefined,
  };
}

before(async () => {
  t = await createTestApp({}, { changes: true });
  const base = await listen(t.app);
  tarball = await uploadApp({ base }, { 'slipway.json': '{}' });
  const owner: LeaseOwner = { id: 'planes/1', nodePrefix: 'planes/' };
  worker = startWorker({
    db: t.database.db,
    runtime: standInRuntime(),
    reports: createOwnPlaneReports(t.database.db, { owner, leaseSeconds: 30 }),
    changes: t.changes!,
    logger: t.logger,
    owner,
    concurrency: 2,
  });
});
after(async () => {
  await worker.stop();
  await t.close();
});

interface Row {
  latest_revision_id: string | null;
  active_revision_id: string | null;
}

/** One deployment on one plane, driven through a script. */
interface Plane {
  name: string;
  push(plan: Plan): Promise<string>;
  /** A held revision is under way (the plane took it up). */
  started(revisionId: string): Promise<void>;
  /** What the plane does once nobody pushes: it works until every revision is final, held ones succeeding. */
  settle(): Promise<void>;
  readonly deploymentId: string;
}

const api = () => client(t.app);
const deploymentRow = async (id: string): Promise<Row> =>
  (
    await t.database.pool.query<Row>('select latest_revision_id, active_revision_id from deployments where id = $1', [
      id,
    ])
  ).rows[0]!;
const statuses = async (deploymentId: string): Promise<Map<string, RevisionStatus>> =>
  new Map(
    (
      await t.database.pool.query<{ id: string; status: RevisionStatus }>(
        'select id, status from revisions where deployment_id = $1',
        [deploymentId],
      )
    ).rows.map((r) => [r.id, r.status]),
  );
const numberOf = async (revisionId: string | null): Promise<number | null> =>
  revisionId === null
    ? null
    : (await t.database.pool.query<{ number: number }>('select number from revisions where id = $1', [revisionId]))
        .rows[0]!.number;

async function ownPlane(name: string): Promise<Plane> {
  const config = { source_tarball_path: tarball, framework_config_path: 'slipway.json' };
  let deploymentId = '';
  return {
    name: 'own plane',
    get deploymentId() {
      return deploymentId;
    },
    async push(plan) {
      const res =
        deploymentId === ''
          ? await api().post('/v2/deployments', { name, source: 'internal_source', source_revision_config: config })
          : await api().patch(`/v2/deployments/${deploymentId}`, { source_revision_config: config });
      assert.ok(res.status === 200 || res.status === 201, JSON.stringify(res.body));
      deploymentId = res.body.id;
      const id: string = res.body.latest_revision_id;
      plans.set(id, plan);
      return id;
    },
    async started(revisionId) {
      await eventually(`revision ${revisionId} held in its build on the own plane`, () => held.has(revisionId));
    },
    async settle() {
      await eventually(`every revision of ${name} final on the own plane`, async () => {
        for (const release of held.values()) release();
        return [...(await statuses(deploymentId)).values()].every(isFinalRevisionStatus);
      });
    },
  };
}

async function listenerPlane(name: string, listenerId: string, credential: string): Promise<Plane> {
  const as = client(t.app, null);
  const auth = { authorization: `Bearer ${credential}` };
  let deploymentId = '';
  let image = 0;
  /** One pass of the agent: its desired state's revision is reported as its plan says. */
  const pass = async (): Promise<{ id: string; status: RevisionStatus } | null> => {
    const state = await as.get(`/v2/listeners/${listenerId}/desired-state`, auth);
    assert.equal(state.status, 200, JSON.stringify(state.body));
    const desired = (
      state.body.deployments as { deployment_id: string; revision: { id: string; status: RevisionStatus } | null }[]
    ).find((d) => d.deployment_id === deploymentId);
    const revision = desired?.revision ?? null;
    if (revision === null || isFinalRevisionStatus(revision.status)) return null;
    const plan = plans.get(revision.id) ?? 'ok';
    const status = plan === 'hold' ? 'AWAITING_DEPLOY' : plan === 'ok' ? 'DEPLOYED' : 'DEPLOY_FAILED';
    const res = await as.post(
      `/v2/listeners/${listenerId}/reports`,
      { revision_id: revision.id, status, ...(plan === 'fail' ? { failure_reason: 'rollout_failed' } : {}) },
      auth,
    );
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return { id: revision.id, status };
  };
  return {
    name: 'listener',
    get deploymentId() {
      return deploymentId;
    },
    async push(plan) {
      image += 1;
      const source_revision_config = { image_uri: `ghcr.io/acme/agent:${image}.0.0` };
      const res =
        deploymentId === ''
          ? await api().post('/v2/deployments', {
              name,
              source: 'external_container',
              source_config: { listener_id: listenerId },
              source_revision_config,
            })
          : await api().patch(`/v2/deployments/${deploymentId}`, { source_revision_config });
      assert.ok(res.status === 200 || res.status === 201, JSON.stringify(res.body));
      deploymentId = res.body.id;
      const id: string = res.body.latest_revision_id;
      plans.set(id, plan);
      return id;
    },
    async started(revisionId) {
      const took = await pass();
      assert.equal(took?.id, revisionId, 'the listener took up the latest revision');
    },
    async settle() {
      for (;;) {
        const took = await pass();
        if (took === null) break;
        // A held revision succeeds once nobody pushes any more.
        if (took.status === 'AWAITING_DEPLOY') plans.set(took.id, 'ok');
      }
    },
  };
}

/**
 * Each group of pushes is made back to back ("pushed quickly"); a held revision is first taken up by
 * the plane. After each group the plane settles.
 */
const SCRIPTS: { name: string; groups: Plan[][] }[] = [
  {
    name: 'three pushed quickly while one is under way, the latest failing',
    groups: [['ok'], ['hold', 'ok', 'ok', 'fail']],
  },
  { name: 'a failure in between, then a success', groups: [['ok'], ['hold', 'fail', 'ok']] },
  { name: 'the one under way held, the next one failing', groups: [['ok'], ['hold', 'fail']] },
  { name: 'a failed first revision, then three quickly', groups: [['fail'], ['hold', 'ok', 'ok']] },
  { name: 'one at a time, a failure in between', groups: [['ok'], ['fail'], ['ok'], ['hold'], ['fail']] },
];

test('the own plane and a listener end on the same revision, the one the desired-state rule names', async () => {
  const listener = await registerListener(api().post, 'planes-agree', ['agents']);
  const ends: string[] = [];
  let n = 0;
  for (const script of SCRIPTS) {
    n += 1;
    const planes = [
      await ownPlane(`planes-own-${n}`),
      await listenerPlane(`planes-listener-${n}`, listener.id, listener.credential),
    ];
    const actives: (number | null)[] = [];
    for (const plane of planes) {
      for (const group of script.groups) {
        for (const plan of group) {
          const id = await plane.push(plan);
          if (plan === 'hold') await plane.started(id);
        }
        await plane.settle();
      }
      const row = await deploymentRow(plane.deploymentId);
      const statusOf = await statuses(plane.deploymentId);
      assert.equal(
        row.active_revision_id,
        targetRevisionId(row, (id) => statusOf.get(id)),
        `${script.name}: the ${plane.name} runs what the rule names`,
      );
      actives.push(await numberOf(row.active_revision_id));
    }
    ends.push(`${script.name}: own plane ${actives[0]}, listener ${actives[1]}`);
    assert.equal(actives[0], actives[1], `${script.name}: both planes end on the same revision\n${ends.join('\n')}`);
  }
});
