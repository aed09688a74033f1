/**
 * A condition of a deployment's serving revision follows one rule whichever data plane reports it
 * (docs/lifecycle.md, "Conditions"): a crash loop seen by the own data plane's runtime and one told by
 * a listener's heartbeat move a deployment in the same status the same way. The deployments are put in
 * each status directly (some are reached only in races, a crash told while the revision is still
 * being made the active one); what is compared is the status a user then reads. Every condition of
 * the one table (src/domain/conditions.ts) is then driven through each data plane that reports it, from
 * every status, so a new condition cannot follow two rules.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';
import { createLogger } from '../../src/logger.ts';
import { DEPLOYMENT_STATUSES, type DeploymentStatus } from '../../src/domain/states.ts';
import {
  DEPLOYMENT_CONDITIONS,
  DEPLOYMENT_CONDITION_NAMES,
  conditionMove,
  type DeploymentConditionName,
} from '../../src/domain/conditions.ts';
import { LISTENER_CONDITIONS } from '../../src/store/schema.ts';
import type { OwnPlaneReports } from '../../src/domain/data-plane.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { reportAppExit } from '../../src/dataplane/app-exit-reports.ts';
import type { LogWriter } from '../../src/dataplane/log-writer.ts';
import { agent, createProtocolFixture, newDeployment, newListener, type ProtocolFixture } from './protocol-fixture.ts';

let f: ProtocolFixture;
before(async () => {
  f = await createProtocolFixture();
});
after(() => f.close());

let clock = Date.now();
const silentLog: LogWriter = {
  write: () => undefined,
  system: () => undefined,
  tail: () => [],
  flush: async () => undefined,
  close: async () => undefined,
};

/** Puts the deployment in `status` with `revisionId` serving, as the test's starting point. */
async function put(deploymentId: string, revisionId: string, status: DeploymentStatus): Promise<void> {
  await f.t.database.db
    .updateTable('deployments')
    .set({ status, active_revision_id: revisionId })
    .where('id', '=', deploymentId)
    .execute();
}

const statusOf = async (deploymentId: string): Promise<string> =>
  (
    await f.t.database.db
      .selectFrom('deployments')
      .select('status')
      .where('id', '=', deploymentId)
      .executeTakeFirstOrThrow()
  ).status;

const OWN_WORKER = { id: 'test-node/1', nodePrefix: 'test-node/' };

/** A deployment on the own data plane, serving, in `status`. */
async function ownPlaneDeployment(status: DeploymentStatus): Promise<{ id: string; revisionId: string }> {
  // Made on a listener and then taken off it: the own data plane reports for deployments without one.
  const l = await newListener(f.api);
  const { id, revisionId } = await newDeployment(f.api, l.id);
  // Run by the worker whose reports these are (src/service/lifecycle-reports.ts checks its lease).
  await f.t.database.db
    .updateTable('deployments')
    .set({ listener_id: null, runner_owner: OWN_WORKER.id })
    .where('id', '=', id)
    .execute();
  await put(id, revisionId, status);
  return { id, revisionId };
}

/** The own data plane's reports, as its worker makes them. */
const ownPlaneReports = () =>
  createOwnPlaneReports(f.t.database.db, { owner: { id: 'test-node/1', nodePrefix: 'test-node/' }, leaseSeconds: 30 });

/** A listener deployment its agent reported DEPLOYED (READY), with the agent. */
async function listenerDeployment() {
  const l = await newListener(f.api);
  const d = await newDeployment(f.api, l.id);
  const a = agent(f, l);
  assert.equal((await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' })).status, 200);
  return { d, a };
}

/** A heartbeat of the agent, observed after every one before it. */
async function heartbeat(a: ReturnType<typeof agent>, deployments: Record<string, unknown>[]): Promise<void> {
  const res = await a.heartbeat({
    version: '0.1.0',
    namespaces: ['agents'],
    deployments,
    observed_at: new Date((clock += 1000)).toISOString(),
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

/** A deployment on the own data plane in `status`, whose serving app crashes a fifth time in a row. */
async function ownPlaneCrashLoop(status: DeploymentStatus): Promise<string> {
  const { id, revisionId } = await ownPlaneDeployment(status);
  const { workspace_id: workspaceId } = await f.t.database.db
    .selectFrom('deployments')
    .select('workspace_id')
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  const real = ownPlaneReports();
  let told = false;
  const reports: OwnPlaneReports = {
    ...real,
    reportCondition: async (report) => {
      await real.reportCondition(report);
      told = true;
    },
  };
  reportAppExit(
    { reports, logger: createLogger('silent') },
    { revisionId, deployment: { id, workspace_id: workspaceId } },
    silentLog,
    {
      instanceId: 'web-0',
      kind: 'web',
      exit: { code: 1, signal: null, outOfMemory: false, memoryLimitBytes: null, leftover: null },
      crashes: 5,
      restartInMs: 1000,
    },
    true,
  );
  await eventually('the own data plane to have told the crash loop', () => told);
  return statusOf(id);
}

/** A listener deployment in `status` whose agent's heartbeat says its serving revision crash-loops. */
async function listenerCrashLoop(status: DeploymentStatus): Promise<string> {
  const { d, a } = await listenerDeployment();
  await put(d.id, d.revisionId, status);
  await heartbeat(a, [crashLoopOf(d)]);
  return statusOf(d.id);
}

const crashLoopOf = (d: { id: string; revisionId: string }) => ({
  deployment_id: d.id,
  revision_id: d.revisionId,
  condition: 'crash_loop',
  reason: 'crash_loop',
});

/**
 * How a listener's agent tells each condition a listener reports (the table's `reportedBy`), for a
 * deployment in `status`: its heartbeat's entries. A condition a listener gets to report needs its
 * way here, and is then held to the table below.
 */
const LISTENER_TELLS: Partial<Record<DeploymentConditionName, (status: DeploymentStatus) => Promise<string>>> = {
  crash_loop: listenerCrashLoop,
  async recovered(status) {
    const { d, a } = await listenerDeployment();
    await heartbeat(a, [crashLoopOf(d)]);
    await put(d.id, d.revisionId, status);
    await heartbeat(a, []);
    return statusOf(d.id);
  },
};

describe('one rule for conditions on both data planes', () => {
  test('every condition a listener reports is in the table, and the table knows how a listener tells it', () => {
    const byListener = DEPLOYMENT_CONDITION_NAMES.filter((c) =>
      DEPLOYMENT_CONDITIONS[c].reportedBy.includes('listener'),
    );
    assert.deepEqual(Object.keys(LISTENER_TELLS).sort(), [...byListener].sort());
    // A heartbeat's conditions: each moves the deployment by the table, but update_failed, which is an
    // event only (deployment.update_failed) and leaves the status alone.
    for (const condition of LISTENER_CONDITIONS)
      if (condition !== 'update_failed') assert.ok(byListener.includes(condition), condition);
  });

  for (const condition of DEPLOYMENT_CONDITION_NAMES) {
    for (const plane of DEPLOYMENT_CONDITIONS[condition].reportedBy) {
      test(`${condition} reported by ${plane === 'local' ? 'the own data plane' : 'a listener'} moves a deployment as the table says, from every status`, async () => {
        const moved: string[] = [];
        const expected: string[] = [];
        for (const status of DEPLOYMENT_STATUSES) {
          let after: string;
          if (plane === 'local') {
            const { id } = await ownPlaneDeployment(status);
            await ownPlaneReports().reportCondition({ deploymentId: id, condition, data: {} });
            after = await statusOf(id);
          } else after = await LISTENER_TELLS[condition]!(status);
          moved.push(`${status} -> ${after}`);
          expected.push(`${status} -> ${conditionMove(condition, status) ?? status}`);
        }
        assert.deepEqual(moved, expected);
      });
    }
  }

  for (const status of DEPLOYMENT_STATUSES) {
    test(`a crash loop of the serving revision of a deployment ${status} moves it the same way on both planes`, async () => {
      const own = await ownPlaneCrashLoop(status);
      const listener = await listenerCrashLoop(status);
      assert.equal(own, listener, `own data plane: ${status} -> ${own}; listener: ${status} -> ${listener}`);
    });
  }
});
