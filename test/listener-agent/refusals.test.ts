/**
 * What the API server answers an apply with decides what the agent does (issue 25, defect 2): a
 * refusal (any 4xx or 5xx whose Status refuses the request itself) fails a new revision, or an in-place
 * change of a DEPLOYED one, with the API server's words; what is transient (a busy or restarting
 * server, a conflict) is retried until it goes through. The refusal here is the real one that was
 * retried forever: a native sidecar's `restartPolicy`, which a 1.26 server's schema does not declare.
 */
import assert from 'node:assert/strict';
import { afterEach, describe } from 'node:test';
import { TRANSIENT_ANSWERS, statusAnswer } from './fake-kube.ts';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';
import { pause } from '../support/wait.ts';

const SIDECAR = { name: 'proxy', image: 'envoyproxy/envoy:v1.30' };

// Each test has its own deadline, which only ends a hung one (today's agent left the first QUEUED for good).
describe('listener agent: refusals and transient answers of the API server', () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  /** The first of `statuses` reported for the revision. */
  const firstOf = (revisionId: string, ...statuses: string[]) =>
    world.slipway.waitFor(() =>
      world.slipway.reports.find((r) => r.revision_id === revisionId && statuses.includes(r.status)),
    );

  test(
    'a new revision a 1.26 server refuses with a 500 fails at once with its words, not left QUEUED',
    { timeout: 60_000 },
    async () => {
      world = await startWorld({ minor: 26 });
      const d = deployment({
        name: 'with-sidecar',
        revision: revision({ resource_spec: { sidecars: [SIDECAR] } }),
      });
      world.slipway.upsert(d);
      const agent = world.start();

      const failed = await firstOf(d.revision!.id, 'DEPLOY_FAILED');
      assert.equal(failed.failure_reason, 'invalid_manifest');
      assert.match(
        failed.message ?? '',
        /Deployment agents\/with-sidecar: .*initContainers\[0\]\.restartPolicy: field not declared in schema \(HTTP 500\)/,
      );
      assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['DEPLOY_FAILED']);
      await agent.stop();
    },
  );

  test(
    'an in-place change a 1.26 server refuses is a deployment.update_failed with its words; what ran stays',
    { timeout: 60_000 },
    async () => {
      world = await startWorld({ minor: 26 }, { heartbeatSeconds: 1 });
      const spec = { min_scale: 1 };
      const d = deployment({ name: 'changed', resource_spec: spec, revision: revision({ resource_spec: spec }) });
      world.slipway.upsert(d);
      const agent = world.start();
      await firstOf(d.revision!.id, 'DEPLOYING');
      world.kube.markAvailable(NAMESPACE, 'changed');
      await firstOf(d.revision!.id, 'DEPLOYED');

      world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, resource_spec: { sidecars: [SIDECAR] } });
      const beat = await world.slipway.waitFor(() =>
        world.slipway.heartbeats.find((h) => h.deployments?.some((c) => c.deployment_id === d.deployment_id)),
      );
      const condition = beat.deployments!.find((c) => c.deployment_id === d.deployment_id)!;
      assert.equal(condition.condition, 'update_failed');
      assert.equal(condition.reason, 'invalid_manifest');
      assert.match(condition.message, /restartPolicy: field not declared in schema/);
      const template = world.kube.get('Deployment', NAMESPACE, 'changed')!.spec!.template as {
        spec: { initContainers?: unknown[] };
      };
      assert.equal(template.spec.initContainers, undefined, 'the pods of before keep serving');
      assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
      await agent.stop();
    },
  );

  test(
    'an admission webhook that denies the Deployment fails the revision with its words',
    { timeout: 60_000 },
    async () => {
      world = await startWorld();
      world.kube.failApplies(
        'Deployment',
        'unsigned',
        statusAnswer(
          403,
          'Forbidden',
          'admission webhook "verify-images.kyverno.svc" denied the request: image ghcr.io/acme/support-agent:1.4.2 is not signed',
        ),
      );
      const d = deployment({ name: 'unsigned' });
      world.slipway.upsert(d);
      const agent = world.start();
      const failed = await firstOf(d.revision!.id, 'DEPLOY_FAILED');
      assert.equal(failed.failure_reason, 'invalid_manifest');
      assert.match(failed.message ?? '', /denied the request: image .* is not signed \(HTTP 403\)/);
      await agent.stop();
    },
  );

  test(
    'busy, restarting or conflicting answers are retried until the revision deploys',
    { timeout: 60_000 },
    async () => {
      world = await startWorld();
      world.kube.answerNextApplies(
        TRANSIENT_ANSWERS.tooManyRequests!,
        TRANSIENT_ANSWERS.conflict!,
        TRANSIENT_ANSWERS.timeout!,
        TRANSIENT_ANSWERS.unavailable!,
        TRANSIENT_ANSWERS.internalText!,
      );
      const d = deployment({ name: 'patient' });
      world.slipway.upsert(d);
      const agent = world.start();

      const applied = await firstOf(d.revision!.id, 'DEPLOYING', 'DEPLOY_FAILED');
      assert.equal(applied.status, 'DEPLOYING', `${applied.failure_reason}: ${applied.message}`);
      world.kube.markAvailable(NAMESPACE, 'patient');
      await firstOf(d.revision!.id, 'DEPLOYED');
      assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
      await agent.stop();
    },
  );

  test(
    'an apply to a namespace that does not exist yet waits for it rather than failing',
    { timeout: 60_000 },
    async () => {
      world = await startWorld({ namespaces: ['default'] });
      const d = deployment({ name: 'early-bird' });
      world.slipway.upsert(d);
      const agent = world.start();
      await world.kube.waitFor(() => world.kube.applies().length >= 3);
      world.kube.addNamespace(NAMESPACE);
      const applied = await firstOf(d.revision!.id, 'AWAITING_DEPLOY', 'DEPLOY_FAILED');
      assert.equal(applied.status, 'AWAITING_DEPLOY', `${applied.failure_reason}: ${applied.message}`);
      await agent.stop();
    },
  );

  test(
    "a namespace that does not come fails the revision with the API server's words, not left QUEUED",
    { timeout: 60_000 },
    async () => {
      // Listing in a namespace that does not exist is an empty list (as on a real API server): the
      // namespace is watched, and only the apply says it is missing.
      world = await startWorld({ namespaces: ['default'] }, {}, { missingNamespaceConfirmMs: 500 });
      const d = deployment({ name: 'nowhere' });
      world.slipway.upsert(d);
      const agent = world.start();
      const failed = await firstOf(d.revision!.id, 'DEPLOY_FAILED', 'AWAITING_DEPLOY');
      assert.equal(failed.status, 'DEPLOY_FAILED');
      assert.equal(failed.failure_reason, 'namespace_not_found');
      assert.match(failed.message ?? '', /namespaces "agents" not found/);
      assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['DEPLOY_FAILED']);
      // Once failed, the agent stops applying it.
      const applies = world.kube.applies().length;
      // The scenario: a second without another apply (a pause that is the test, not a wait).
      await pause(1_000, 'a second of the agent running without another apply');
      assert.ok(world.kube.applies().length <= applies + 1, 'no apply after the failure');
      await agent.stop();
    },
  );
});
