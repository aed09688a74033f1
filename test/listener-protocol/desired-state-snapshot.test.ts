/**
 * The desired state is one consistent picture: read while a patch commits, it is the state before the
 * patch or the state after it, never a mix of the two. A mix (the deployment row from before, its
 * revisions from after) would name no revision at all, or the active one, while the latest is merely
 * superseded: an agent would roll the cluster back, or stop rolling out, until its next read.
 *
 * The read is held between its statements (a Kysely plugin on its database handle) while the patch
 * commits through the API, which makes the race that a busy service hits now and then happen every time.
 */
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import { after, before, test } from 'node:test';
import type { KyselyPlugin } from 'kysely';
import { createListenerProtocolService } from '../../src/service/listener-protocol.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

test('a desired state read while a patch commits is the state before it or after it', async () => {
  const api = client(t.app);
  const listener = await api.post('/v2/listeners', {
    compute_type: 'k8s',
    compute_id: 'snapshot-cluster',
    compute_config: { k8s_namespaces: ['agents'] },
  });
  assert.equal(listener.status, 201, JSON.stringify(listener.body));
  const created = await api.post('/v2/deployments', {
    name: 'snapshot-agent',
    source: 'external_container',
    source_config: { listener_id: listener.body.id },
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1.0.0' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));

  // After the read's first statement, the patch commits (a new revision, the queued one superseded).
  let between: (() => Promise<void>) | null = null;
  const holdBetweenStatements: KyselyPlugin = {
    transformQuery: (args) => args.node,
    async transformResult(args) {
      const hook = between;
      between = null;
      if (hook) await hook();
      return args.result;
    },
  };
  const protocol = createListenerProtocolService({
    db: t.database.db.withPlugin(holdBetweenStatements),
    secretBox: t.secretBox,
  });

  const beforePatch = await protocol.desiredState(listener.body.id);
  assert.equal(beforePatch.state.deployments[0]!.revision?.id, created.body.latest_revision_id);
  let patchedRevision = '';
  between = async () => {
    const patched = await api.patch(`/v2/deployments/${created.body.id}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:2.0.0' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    patchedRevision = patched.body.latest_revision_id;
  };
  const during = await protocol.desiredState(listener.body.id);
  assert.ok(patchedRevision !== '', 'the patch ran in the middle of the read');
  const afterPatch = await protocol.desiredState(listener.body.id);
  assert.equal(afterPatch.state.deployments[0]!.revision?.id, patchedRevision);

  assert.ok(
    isDeepStrictEqual(during, beforePatch) || isDeepStrictEqual(during, afterPatch),
    `the state read during the patch is neither the one before nor the one after it: ${JSON.stringify(during.state.deployments[0]!.revision)}`,
  );
});
