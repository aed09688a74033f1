/**
 * Deleting a listener deployment (docs/listener-protocol.md, "Deletion"): it stays AWAITING_DELETE,
 * marked `delete: true` in the desired state, until its listener confirms everything is gone; and
 * heartbeats (docs/listener-protocol.md, "Heartbeat"): what the listener resource shows of its agent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { claimDeploymentToDelete } from '../../src/store/work-leases.ts';
import {
  agent,
  createProtocolFixture,
  eventTrail,
  newDeployment,
  newListener,
  type ProtocolFixture,
} from './protocol-fixture.ts';
import { createTestClock } from '../support/clock.ts';

let f: ProtocolFixture;
/** The service's clock: the heartbeat tests move it instead of waiting 90 s or dating last_seen_at back. */
const clock = createTestClock();
before(async () => {
  f = await createProtocolFixture({ now: clock.now });
});
after(() => f.close());

describe('deletion confirmed', () => {
  test('the row goes only when the listener confirms; until then it is AWAITING_DELETE and marked delete', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    await a.desiredState();

    assert.equal((await f.api.delete(`/v2/deployments/${d.id}?delete_tracing_project=true`)).status, 204);
    const pending = await f.api.get(`/v2/deployments/${d.id}`);
    assert.equal(pending.status, 200, 'still there');
    assert.equal(pending.body.status, 'AWAITING_DELETE');
    const state = (await a.desiredState()).body.deployments;
    assert.equal(state.length, 1);
    assert.equal(state[0].delete, true);
    assert.equal(state[0].revision.id, d.revisionId, 'what it ran, so the listener knows what to remove');
    assert.equal((await f.api.delete(`/v2/deployments/${d.id}`)).status, 204, 'deleting again is fine');

    const confirmed = await a.confirmDeletion(d.id);
    assert.equal(confirmed.status, 204);
    assert.equal(confirmed.body, undefined);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).status, 404);
    assert.deepEqual((await a.desiredState()).body.deployments, []);
    const projects = (await f.api.get('/v2/tracing-projects?limit=100')).body.resources.map(
      (p: { name: string }) => p.name,
    );
    assert.ok(!projects.includes(d.name), 'delete_tracing_project=true was carried out at confirmation');
    const trail = await eventTrail(f, d.id);
    assert.deepEqual(trail.slice(-2), [
      'deployment.status_changed:READY->AWAITING_DELETE',
      'deployment.deleted:AWAITING_DELETE->',
    ]);

    assert.equal((await a.confirmDeletion(d.id)).status, 204, 'a second confirmation is 204 too');
    assert.equal((await f.api.delete(`/v2/listeners/${l.id}`)).status, 204, 'and the listener can go now');
  });

  test('the tracing project stays when the delete did not ask for its removal; unfinished revisions are interrupted', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    await f.api.delete(`/v2/deployments/${d.id}`);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}/revisions/${d.revisionId}`)).body.status, 'INTERRUPTED');
    assert.equal((await a.confirmDeletion(d.id)).status, 204);
    const projects = (await f.api.get('/v2/tracing-projects?limit=100')).body.resources.map(
      (p: { name: string }) => p.name,
    );
    assert.ok(projects.includes(d.name));
  });

  test("a deployment that is not being deleted cannot be confirmed deleted (409); another listener's is 404", async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const refused = await agent(f, l).confirmDeletion(d.id);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, 'conflict');
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).status, 200);

    const other = await newListener(f.api);
    const notMine = await agent(f, other).confirmDeletion(d.id);
    assert.equal(notMine.status, 404);
    assert.equal(notMine.body.detail, `Deployment ID ${d.id} not found.`);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).status, 200);
  });

  test('a listener that never called cannot have made anything: the row goes with the delete request', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    assert.equal((await f.api.delete(`/v2/deployments/${d.id}`)).status, 204);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).status, 404);
  });

  test('a workspace API key can confirm a deletion (a listener that is gone for good)', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    await agent(f, l).heartbeat({ version: '0.1.0', namespaces: ['agents'] });
    await f.api.delete(`/v2/deployments/${d.id}`);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'AWAITING_DELETE');
    assert.equal((await f.api.post(`/v2/listeners/${l.id}/deletions`, { deployment_id: d.id })).status, 204);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).status, 404);
  });

  test("the local worker does not tear down a listener's deployment awaiting its confirmation", async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    await agent(f, l).desiredState();
    await f.api.delete(`/v2/deployments/${d.id}`);
    const claimed = await f.t.database.db
      .transaction()
      .execute((tx) => claimDeploymentToDelete(tx, { id: 'test-node/1', nodePrefix: 'test-node/' }));
    assert.notEqual(claimed?.id, d.id);
  });
});

describe('heartbeat', () => {
  test('never seen, then connected with version and namespaces, then stale once 90 s pass without a call', async () => {
    const l = await newListener(f.api, ['agents', 'batch']);
    const fresh = (await f.api.get(`/v2/listeners/${l.id}`)).body;
    assert.equal(fresh.state, 'never_seen');
    assert.equal(fresh.last_seen_at, null);
    assert.equal(fresh.watched_namespaces, null);
    assert.equal(fresh.agent_version, null);

    const beat = await agent(f, l).heartbeat({
      version: '0.2.1',
      namespaces: ['agents'],
      message: 'batch: forbidden (RBAC)',
    });
    assert.equal(beat.status, 200, JSON.stringify(beat.body));
    assert.equal(beat.body.id, l.id);
    assert.equal(beat.body.state, 'connected');
    assert.equal(beat.body.agent_version, '0.2.1');
    assert.deepEqual(beat.body.watched_namespaces, ['agents']);
    assert.deepEqual(beat.body.namespaces_not_watched, ['batch'], 'a listener installed wrong shows');
    assert.equal(beat.body.agent_message, 'batch: forbidden (RBAC)');
    assert.ok(
      Math.abs(clock.now().getTime() - Date.parse(beat.body.last_seen_at)) < 60_000,
      'seen at the clock’s time',
    );

    const got = (await f.api.get(`/v2/listeners/${l.id}`)).body;
    assert.deepEqual(got, beat.body, 'the listener shows what the heartbeat answered');
    const listed = (await f.api.get('/v2/listeners?limit=100')).body.resources.find(
      (x: { id: string }) => x.id === l.id,
    );
    assert.equal(listed.state, 'connected');
    assert.equal(listed.agent_version, '0.2.1');

    // The service's clock moves on without a call from the agent.
    clock.advance(89_000);
    assert.equal((await f.api.get(`/v2/listeners/${l.id}`)).body.state, 'connected', 'up to 90 s is still connected');
    clock.advance(2_000);
    const stale = (await f.api.get(`/v2/listeners/${l.id}`)).body;
    assert.equal(stale.state, 'stale', '91 s without a call');
    assert.equal(stale.agent_version, '0.2.1', 'what it said last stays');
    const listedStale = (await f.api.get('/v2/listeners?limit=100')).body.resources.find(
      (x: { id: string }) => x.id === l.id,
    );
    assert.equal(listedStale.state, 'stale', 'the list shows it too');

    clock.advance(10 * 60_000);
    await agent(f, l).desiredState();
    assert.equal(
      (await f.api.get(`/v2/listeners/${l.id}`)).body.state,
      'connected',
      'a desired-state request counts as seen',
    );

    clock.advance(91_000);
    assert.equal((await f.api.get(`/v2/listeners/${l.id}`)).body.state, 'stale');
    const again = await agent(f, l).heartbeat({ version: '0.2.1', namespaces: ['agents'] });
    assert.equal(again.body.state, 'connected', 'a heartbeat after a silence connects it again');
    assert.equal((await f.api.get(`/v2/listeners/${l.id}`)).body.state, 'connected');
  });

  test('a change of version or namespaces writes an event; the same heartbeat again does not; updated_at stays', async () => {
    const l = await newListener(f.api);
    const before = (await f.api.get(`/v2/listeners/${l.id}`)).body;
    const a = agent(f, l);
    await a.heartbeat({ version: '0.1.0', namespaces: ['agents'] });
    await a.heartbeat({ version: '0.1.0', namespaces: ['agents'] });
    const upgraded = await a.heartbeat({ version: '0.2.0', namespaces: ['agents'] });
    assert.equal(upgraded.body.updated_at, before.updated_at);
    const events = await f.t.database.db
      .selectFrom('events')
      .selectAll()
      .where('subject_id', '=', l.id)
      .where('type', '=', 'listener.agent_changed')
      .orderBy('id')
      .execute();
    assert.deepEqual(
      events.map((e) => [e.data.previous_agent_version, e.data.agent_version]),
      [
        [null, '0.1.0'],
        ['0.1.0', '0.2.0'],
      ],
    );
  });

  test('bad heartbeats are 422 and change nothing', async () => {
    const l = await newListener(f.api);
    const a = agent(f, l);
    for (const [body, field] of [
      [{ namespaces: ['agents'] }, 'version'],
      [{ version: '1', namespaces: ['Not A Namespace'] }, 'namespaces'],
      [{ version: '', namespaces: [] }, 'version'],
      [{ version: '1' }, 'namespaces'],
    ] as const) {
      const res = await a.heartbeat(body);
      assert.equal(res.status, 422, JSON.stringify(body));
      assert.equal(res.body.detail[0].loc[1], field);
    }
    assert.equal((await f.api.get(`/v2/listeners/${l.id}`)).body.state, 'never_seen');
  });
});
