/**
 * A credential revoked under a running agent: the agent says so loudly (an error in its log naming
 * what to do) instead of a warning lost among retries, and keeps running without doing anything.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

describe('a listener credential revoked while the agent runs', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let listener: { id: string; credential: string };

  before(async () => {
    world = await startE2eWorld();
    listener = await world.registerListener();
    agent = world.startAgent(listener);
  });
  after(async () => {
    await world?.close();
  });

  test('the agent logs an error saying the credential was refused and how to replace it', async () => {
    await eventually(
      'the agent connected',
      async () => (await world.api('GET', `/v2/listeners/${listener.id}`)).body.agent_version !== null,
      { describe: () => agent.output() },
    );
    const credentials = await world.api('GET', `/v2/listeners/${listener.id}/credentials`);
    const revoked = await world.api(
      'DELETE',
      `/v2/listeners/${listener.id}/credentials/${credentials.body.resources[0].id}`,
    );
    assert.equal(revoked.status, 204);
    // A change wakes the agent's long-poll, which the service now answers 401.
    await world.api('POST', '/v2/deployments', {
      name: 'after-revoke',
      source: 'external_container',
      source_config: { listener_id: listener.id },
      source_revision_config: { image_uri: 'ghcr.io/acme/support-agent:1.4.2' },
    });
    const line = await eventually(
      'the error in the agent log',
      async () =>
        agent
          .output()
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as { level: number; msg: string })
          .find((l) => l.msg.includes('refused the listener credential')),
      { describe: () => agent.output() },
    );
    assert.equal(line.level, 50, 'logged as an error');
    assert.match(line.msg, /revoked.*Make a new one.*restart the agent/);
    assert.equal(world.kube.list({ selector: 'app.kubernetes.io/managed-by=slipway-listener' }).length, 0);
  });
});
