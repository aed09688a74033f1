/**
 * A listener with a namespace it may not read (no Role there: the API server answers 403): the
 * heartbeat says which namespaces are watched and why one is not, deployments of that namespace fail
 * with a reason, and deployments of the other namespaces are not held up by it.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe } from 'node:test';
import pino from 'pino';
import { NAMESPACE, deployment, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';

const FORBIDDEN = 'billing';

describe('listener agent: a namespace the API server forbids', { timeout: 120_000 }, () => {
  let world: World;
  beforeEach(async () => {
    // The agent believes a 403 once it has lasted this long (an API server that just started denies
    // everything for a moment: api-server-restart.test.ts).
    world = await startWorld(
      { namespaces: [NAMESPACE, FORBIDDEN] },
      { namespaces: [NAMESPACE, FORBIDDEN] },
      { forbiddenConfirmMs: 300 },
    );
    world.kube.forbid(FORBIDDEN);
  });
  afterEach(async () => {
    await world.close();
  });

  const reported = (revisionId: string, status: string) =>
    world.slipway.waitFor(() => world.slipway.reports.find((r) => r.revision_id === revisionId && r.status === status));

  test('the other namespace deploys; the forbidden one fails its deployments and is reported not watched', async () => {
    const healthy = deployment({ name: 'healthy' });
    const blocked = deployment({ name: 'blocked', namespace: FORBIDDEN });
    world.slipway.upsert(healthy);
    world.slipway.upsert(blocked);
    const agent = world.start();

    await reported(healthy.revision!.id, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'healthy');
    await reported(healthy.revision!.id, 'DEPLOYED');

    const failed = await reported(blocked.revision!.id, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'namespace_not_watched');
    assert.match(failed.message ?? '', /namespace billing is not watched.*forbid.*cannot list resource/);
    assert.deepEqual(world.slipway.statusesOf(blocked.revision!.id), ['DEPLOY_FAILED']);
    assert.equal(world.kube.list({ namespace: FORBIDDEN }).length, 0);

    const beat = await world.slipway.waitFor(() => world.slipway.heartbeats.at(-1));
    assert.deepEqual(beat.namespaces, [NAMESPACE]);
    assert.match(beat.message ?? '', /namespace billing is not watched: the Kubernetes API server forbids it/);

    // Granted later: the agent keeps trying, and the next heartbeat watches it.
    world.kube.allow(FORBIDDEN);
    const watched = await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find((h) => h.namespaces.includes(FORBIDDEN)),
    );
    assert.deepEqual(watched.namespaces, [NAMESPACE, FORBIDDEN]);
    await agent.stop();
  });

  test('the agent logs what it makes of the namespace once per change, not once per try', async () => {
    await world.close();
    const lines: { level: number; msg: string; namespace?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as never) });
    world = await startWorld(
      { namespaces: [NAMESPACE, FORBIDDEN] },
      { namespaces: [NAMESPACE, FORBIDDEN], heartbeatSeconds: 1 },
      { forbiddenConfirmMs: 300, logger },
    );
    world.kube.forbid(FORBIDDEN);
    const agent = world.start();
    const aboutIt = () => lines.filter((l) => l.namespace === FORBIDDEN && l.level >= 40);
    await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find((h) => h.message?.includes('namespace billing is not watched: the Kubernetes')),
    );
    const told = aboutIt().length;
    // Many more refused lists of every kind: nothing more to say about it.
    const refused = world.kube.forbiddenAnswers.length;
    await world.kube.waitFor(() => world.kube.forbiddenAnswers.length >= refused + 40);
    assert.equal(
      aboutIt().length,
      told,
      aboutIt()
        .map((l) => l.msg)
        .join('\n'),
    );
    assert.ok(told <= 2, `one warning for the first refusal and one error once it is confirmed: ${told}`);
    assert.ok(aboutIt().some((l) => l.level === 50 && /namespace refused/.test(l.msg)));

    world.kube.allow(FORBIDDEN);
    await world.slipway.waitFor(() => world.slipway.heartbeats.find((h) => h.namespaces.includes(FORBIDDEN)));
    assert.ok(lines.some((l) => l.namespace === FORBIDDEN && l.msg === 'namespace watched'));
    await agent.stop();
  });

  test('a deletion in the forbidden namespace is not confirmed: what is left there cannot be seen', async () => {
    const gone = deployment({ name: 'gone', namespace: FORBIDDEN, delete: true });
    const other = deployment({ name: 'other', delete: true, revision: null });
    world.slipway.upsert(gone);
    world.slipway.upsert(other);
    const agent = world.start();
    await world.slipway.waitFor(() => world.slipway.deletions.includes(other.deployment_id));
    assert.ok(!world.slipway.deletions.includes(gone.deployment_id));
    world.kube.allow(FORBIDDEN);
    await world.slipway.waitFor(() => world.slipway.deletions.includes(gone.deployment_id));
    await agent.stop();
  });
});
