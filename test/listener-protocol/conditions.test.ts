/**
 * The condition of a deployment's serving revision, from its listener's heartbeat
 * (docs/listener-protocol.md, "Heartbeat"): pods crash-looping make the deployment UNKNOWN and then
 * READY again, an in-place change that fails or rolls out is an event; only changes write anything,
 * a late heartbeat changes nothing, and a listener can only speak for its own deployments.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  agent,
  createProtocolFixture,
  eventTrail,
  newDeployment,
  newListener,
  type Deployment,
  type Listener,
  type ProtocolFixture,
} from './protocol-fixture.ts';

let f: ProtocolFixture;
before(async () => {
  f = await createProtocolFixture();
});
after(() => f.close());

/** A listener with one deployment its agent reported DEPLOYED (READY). */
async function servingDeployment(): Promise<{ l: Listener; d: Deployment; a: ReturnType<typeof agent> }> {
  const l = await newListener(f.api);
  const d = await newDeployment(f.api, l.id);
  const a = agent(f, l);
  assert.equal((await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' })).status, 200);
  return { l, d, a };
}

let clock = Date.now();
/** A heartbeat observed after every one before it (the agent's clock moves on). */
const beat = (deployments: Record<string, unknown>[], observedAt = new Date((clock += 1000)).toISOString()) => ({
  version: '0.1.0',
  namespaces: ['agents'],
  deployments,
  observed_at: observedAt,
});

async function eventsOf(deploymentId: string, type: string) {
  return f.t.database.db
    .selectFrom('events')
    .select(['type', 'from_status', 'to_status', 'data'])
    .where('deployment_id', '=', deploymentId)
    .where('type', '=', type)
    .orderBy('id')
    .execute();
}

describe('deployment conditions from heartbeats', () => {
  test('a serving revision crash-looping makes the deployment UNKNOWN once, and READY again when it is healthy', async () => {
    const { d, a } = await servingDeployment();
    const crashing = {
      deployment_id: d.id,
      revision_id: d.revisionId,
      condition: 'crash_loop',
      reason: 'crash_loop',
      message: 'container app of pod x is CrashLoopBackOff',
    };
    assert.equal((await a.heartbeat(beat([crashing]))).status, 200);
    const down = await f.api.get(`/v2/deployments/${d.id}`);
    assert.equal(down.body.status, 'UNKNOWN');
    const trailAfterFirst = await eventTrail(f, d.id);
    assert.equal(trailAfterFirst.at(-1), 'deployment.status_changed:READY->UNKNOWN');
    const [changed] = (await eventsOf(d.id, 'deployment.status_changed')).slice(-1);
    assert.equal(changed!.data.reason, 'crash_loop');
    assert.equal(changed!.data.revision_id, d.revisionId);
    assert.match(String(changed!.data.message), /CrashLoopBackOff/);

    await a.heartbeat(beat([crashing]));
    await a.heartbeat(beat([{ ...crashing, message: 'crashed again' }]));
    assert.deepEqual(await eventTrail(f, d.id), trailAfterFirst, 'the same condition again writes nothing');

    await a.heartbeat(beat([]));
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'READY');
    const [recovered] = (await eventsOf(d.id, 'deployment.status_changed')).slice(-1);
    assert.equal(recovered!.from_status, 'UNKNOWN');
    assert.equal(recovered!.to_status, 'READY');
    assert.equal(recovered!.data.reason, 'recovered');
    const settled = await eventTrail(f, d.id);
    await a.heartbeat(beat([]));
    assert.deepEqual(await eventTrail(f, d.id), settled, 'healthy again writes nothing');
  });

  test('an in-place change that fails is a deployment.update_failed event, and update_rolled_out once it is in place', async () => {
    const { d, a } = await servingDeployment();
    const refused = {
      deployment_id: d.id,
      revision_id: d.revisionId,
      condition: 'update_failed',
      reason: 'invalid_manifest',
      message: 'Deployment.apps "x" is invalid: spec.template.spec.containers[0].resources: Invalid value',
    };
    await a.heartbeat(beat([refused]));
    await a.heartbeat(beat([refused]));
    const failed = await eventsOf(d.id, 'deployment.update_failed');
    assert.equal(failed.length, 1, 'once, however many heartbeats say it');
    assert.equal(failed[0]!.data.revision_id, d.revisionId);
    assert.equal(failed[0]!.data.reason, 'invalid_manifest');
    assert.match(String(failed[0]!.data.message), /Invalid value/);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'READY', 'the old pods keep serving');
    const listed = await f.api.get(`/v2/deployments/${d.id}/events?limit=100`);
    assert.equal(listed.status, 200);
    const seen = (listed.body.resources as { type: string; data: Record<string, unknown> }[]).find(
      (e) => e.type === 'deployment.update_failed',
    );
    assert.equal(seen?.data.reason, 'invalid_manifest', 'a user reading the deployment events sees it');

    await a.heartbeat(beat([{ ...refused, reason: 'progress_deadline_exceeded', message: 'no progress' }]));
    assert.equal((await eventsOf(d.id, 'deployment.update_failed')).length, 2, 'another reason is another event');

    await a.heartbeat(beat([]));
    const rolled = await eventsOf(d.id, 'deployment.update_rolled_out');
    assert.equal(rolled.length, 1);
    assert.equal(rolled[0]!.data.revision_id, d.revisionId);
    await a.heartbeat(beat([]));
    assert.equal((await eventsOf(d.id, 'deployment.update_rolled_out')).length, 1);
  });

  test('a second refused change (another change id, the same reason) is another update_failed; the same change in other words is not', async () => {
    const { d, a } = await servingDeployment();
    const refused = {
      deployment_id: d.id,
      revision_id: d.revisionId,
      condition: 'update_failed',
      reason: 'invalid_manifest',
      message: 'resources: Invalid value: "64"',
      change: 'first-change',
    };
    await a.heartbeat(beat([refused]));
    await a.heartbeat(beat([{ ...refused, message: 'resources: Invalid value: "64" (again)' }]));
    assert.equal((await eventsOf(d.id, 'deployment.update_failed')).length, 1, 'the same change: one event');
    await a.heartbeat(beat([{ ...refused, change: 'second-change', message: 'resources: Invalid value: "48"' }]));
    await a.heartbeat(beat([{ ...refused, change: 'second-change', message: 'resources: Invalid value: "48"' }]));
    const failed = await eventsOf(d.id, 'deployment.update_failed');
    assert.deepEqual(
      failed.map((e) => e.data.message),
      ['resources: Invalid value: "64"', 'resources: Invalid value: "48"'],
      'the second change is told once, with its own words',
    );
    const bad = await a.heartbeat(beat([{ ...refused, change: '' }]));
    assert.equal(bad.status, 422, 'an empty change id is refused');
  });

  test('an update_failed replaced by crash_loop is no rollout: update_rolled_out only once the condition clears', async () => {
    const { d, a } = await servingDeployment();
    const stuck = {
      deployment_id: d.id,
      revision_id: d.revisionId,
      condition: 'update_failed',
      reason: 'progress_deadline_exceeded',
      message: 'no progress',
    };
    await a.heartbeat(beat([stuck]));
    assert.equal((await eventsOf(d.id, 'deployment.update_failed')).length, 1);
    await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'crash_loop', reason: 'crash_loop' }]),
    );
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'UNKNOWN');
    assert.deepEqual(await eventsOf(d.id, 'deployment.update_rolled_out'), [], 'nothing rolled out');

    await a.heartbeat(beat([stuck]));
    assert.deepEqual(await eventsOf(d.id, 'deployment.update_rolled_out'), []);
    await a.heartbeat(beat([]));
    const rolled = await eventsOf(d.id, 'deployment.update_rolled_out');
    assert.equal(rolled.length, 1, 'the failure cleared: the rollout finished');
    assert.equal(rolled[0]!.data.revision_id, d.revisionId);
  });

  test('an update_failed, then a crash loop, then healthy: the change rolled out once the crash loop cleared', async () => {
    const { d, a } = await servingDeployment();
    const failed = { deployment_id: d.id, revision_id: d.revisionId, condition: 'update_failed', reason: 'crash_loop' };
    await a.heartbeat(beat([failed]));
    await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'crash_loop', reason: 'crash_loop' }]),
    );
    assert.deepEqual(await eventsOf(d.id, 'deployment.update_rolled_out'), []);
    await a.heartbeat(beat([]));
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'READY');
    assert.equal((await eventsOf(d.id, 'deployment.update_rolled_out')).length, 1);

    // A later crash loop with no failed change before it tells no rollout when it clears.
    await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'crash_loop', reason: 'crash_loop' }]),
    );
    await a.heartbeat(beat([]));
    assert.equal((await eventsOf(d.id, 'deployment.update_rolled_out')).length, 1);
  });

  test('a heartbeat observed before one already applied changes no condition', async () => {
    const { d, a } = await servingDeployment();
    const crashing = {
      deployment_id: d.id,
      revision_id: d.revisionId,
      condition: 'crash_loop',
      reason: 'crash_loop',
    };
    const early = new Date((clock += 1000)).toISOString();
    await a.heartbeat(beat([crashing]));
    await a.heartbeat(beat([]));
    const trail = await eventTrail(f, d.id);
    const late = await a.heartbeat(beat([crashing], early));
    assert.equal(late.status, 200, 'still a heartbeat: the listener is seen');
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'READY');
    assert.deepEqual(await eventTrail(f, d.id), trail);
  });

  test('a heartbeat without deployments (an agent of before) leaves the conditions as they are', async () => {
    const { d, a } = await servingDeployment();
    await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'crash_loop', reason: 'crash_loop' }]),
    );
    await a.heartbeat({ version: '0.1.0', namespaces: ['agents'] });
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'UNKNOWN');
  });

  test("a condition for a revision that does not serve, or for another listener's deployment, changes nothing", async () => {
    const { d, a } = await servingDeployment();
    const other = await servingDeployment();
    const trail = await eventTrail(f, other.d.id);
    const res = await a.heartbeat(
      beat([
        { deployment_id: other.d.id, revision_id: other.d.revisionId, condition: 'crash_loop', reason: 'crash_loop' },
        {
          deployment_id: d.id,
          revision_id: other.d.revisionId,
          condition: 'update_failed',
          reason: 'invalid_manifest',
        },
      ]),
    );
    assert.equal(res.status, 200);
    assert.equal((await f.api.get(`/v2/deployments/${other.d.id}`)).body.status, 'READY');
    assert.deepEqual(await eventTrail(f, other.d.id), trail);
    assert.equal((await eventsOf(d.id, 'deployment.update_failed')).length, 0);
    // The other listener's own (empty) heartbeat does not clear or touch anything either.
    await other.a.heartbeat(beat([]));
    assert.deepEqual(await eventTrail(f, other.d.id), trail);
  });

  test('a new revision deployed over a crash loop is READY; the old condition goes without an event', async () => {
    const { d, a } = await servingDeployment();
    await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'crash_loop', reason: 'crash_loop' }]),
    );
    const patched = await f.api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:1.0.1' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const next = patched.body.latest_revision_id as string;
    await a.report({ revision_id: next, status: 'DEPLOYED' });
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'READY');
    const trail = await eventTrail(f, d.id);
    await a.heartbeat(beat([]));
    assert.deepEqual(await eventTrail(f, d.id), trail);
    const left = await f.t.database.db
      .selectFrom('listener_deployment_conditions')
      .selectAll()
      .where('deployment_id', '=', d.id)
      .execute();
    assert.deepEqual(left, []);
  });

  test('bad conditions are 422', async () => {
    const { d, a } = await servingDeployment();
    const bad = await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'on_fire', reason: 'crash_loop' }]),
    );
    assert.equal(bad.status, 422);
    const badReason = await a.heartbeat(
      beat([{ deployment_id: d.id, revision_id: d.revisionId, condition: 'crash_loop', reason: 'Crash Loop' }]),
    );
    assert.equal(badReason.status, 422);
  });
});
