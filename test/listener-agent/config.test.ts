/**
 * The agent's configuration and its reading of the service's answers: a listener installed wrong says
 * which variable is wrong, and a service speaking another protocol is refused whole.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ListenerConfigError, MAX_PROGRESS_DEADLINE_SECONDS, loadListenerConfig } from '@slipway/listener/config';
import { REVISION_STATES } from '../../src/domain/states.ts';
import { ProtocolError, readDesiredState, type WireDesiredState } from '@slipway/listener/desired-state';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const ID = '6f1c2d3e-0000-4000-8000-000000000001';
const ENV = {
  SLIPWAY_URL: 'https://slipway.example.com/',
  SLIPWAY_LISTENER_ID: ID,
  SLIPWAY_LISTENER_CREDENTIAL: 'slwl_abc',
  SLIPWAY_LISTENER_NAMESPACES: 'agents, billing',
  KUBECONFIG: '/home/me/.kube/config',
};

function failure(env: Record<string, string | undefined>): ListenerConfigError {
  try {
    loadListenerConfig(env);
  } catch (error) {
    if (error instanceof ListenerConfigError) return error;
    throw error;
  }
  assert.fail('the configuration loaded');
}

describe('listener configuration', () => {
  test('a complete environment loads, with defaults for the rest', () => {
    const config = loadListenerConfig(ENV);
    assert.equal(config.slipwayUrl, 'https://slipway.example.com');
    assert.deepEqual(config.namespaces, ['agents', 'billing']);
    assert.equal(config.kubeconfigPath, '/home/me/.kube/config');
    assert.equal(config.pollWaitSeconds, 30);
    assert.equal(config.appPort, 8080);
  });

  test('each wrong or missing setting is named', () => {
    assert.equal(failure({ ...ENV, SLIPWAY_URL: undefined }).variable, 'SLIPWAY_URL');
    assert.equal(failure({ ...ENV, SLIPWAY_URL: 'ftp://x' }).variable, 'SLIPWAY_URL');
    assert.equal(failure({ ...ENV, SLIPWAY_LISTENER_ID: 'prod-eu-1' }).variable, 'SLIPWAY_LISTENER_ID');
    const key = failure({ ...ENV, SLIPWAY_LISTENER_CREDENTIAL: 'slw_an_api_key' });
    assert.equal(key.variable, 'SLIPWAY_LISTENER_CREDENTIAL');
    assert.doesNotMatch(key.message, /slw_an_api_key/, 'a secret in the wrong place is not echoed');
    assert.equal(failure({ ...ENV, SLIPWAY_LISTENER_NAMESPACES: 'Agents' }).variable, 'SLIPWAY_LISTENER_NAMESPACES');
    assert.equal(failure({ ...ENV, SLIPWAY_LISTENER_POLL_SECONDS: '90' }).variable, 'SLIPWAY_LISTENER_POLL_SECONDS');
    assert.match(failure({ ...ENV, KUBECONFIG: undefined }).message, /^KUBECONFIG: .*not a Kubernetes pod/);
    const deadline = failure({ ...ENV, SLIPWAY_LISTENER_PROGRESS_DEADLINE_SECONDS: '1800' });
    assert.equal(deadline.variable, 'SLIPWAY_LISTENER_PROGRESS_DEADLINE_SECONDS');
    assert.match(deadline.message, /at most 1500 .*service fails a revision still rolling out after 30 minutes/);
    assert.equal(
      loadListenerConfig({ ...ENV, SLIPWAY_LISTENER_PROGRESS_DEADLINE_SECONDS: '1500' }).progressDeadlineSeconds,
      1500,
    );
    assert.equal(
      loadListenerConfig({ ...ENV, KUBECONFIG: undefined, KUBERNETES_SERVICE_HOST: '10.0.0.1' }).kubeconfigPath,
      null,
    );
  });

  test("the agent's longest rollout deadline ends before the service's deadlines of a rollout", () => {
    // Else the service would fail a stuck rollout as deadline_exceeded before the agent could say why.
    for (const status of ['AWAITING_DEPLOY', 'DEPLOYING'] as const) {
      const deadline = REVISION_STATES[status].deadline;
      assert.ok(deadline !== null && MAX_PROGRESS_DEADLINE_SECONDS < deadline - 60, status);
    }
  });

  test('the command fails fast on a bad setting, naming it', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'packages/listener/src/main.ts')], {
      env: { PATH: process.env.PATH, ...ENV, SLIPWAY_LISTENER_NAMESPACES: '' },
      encoding: 'utf8',
    });
    assert.equal(run.status, 2);
    assert.match(run.stderr, /SLIPWAY_LISTENER_NAMESPACES: is required/);
  });
});

describe('reading the desired state', () => {
  // Typed as the service's OpenAPI document says (what the agent gets); a service of before sends no
  // resource_spec or secret_references on the deployment.
  const revision = {
    id: 'r',
    number: 1,
    status: 'QUEUED' as const,
    image_uri: null,
    secrets: [],
    secret_references: [{ name: 'A', secret_name: 'old', secret_key: 'k' }],
    resource_spec: { min_scale: 1 },
  };
  const deployment = { deployment_id: 'd', name: 'app', namespace: null, delete: false, custom_url: null };
  const body = (deployments: unknown[]) =>
    ({ protocol: 1, listener_id: ID, deployments }) as unknown as WireDesiredState;

  test("a protocol 1 body is read, the deployment's in-place values on its revision", () => {
    const [read] = readDesiredState(
      body([{ ...deployment, resource_spec: { min_scale: 2 }, secret_references: null, revision }]),
      ID,
    ).deployments;
    assert.equal(read!.name, 'app');
    assert.deepEqual(read!.revision!.resource_spec, { min_scale: 2 });
    assert.equal(read!.revision!.secret_references, null);
    assert.equal('resource_spec' in read!, false);
  });

  test("from a service of before, the revision's own values", () => {
    const [read] = readDesiredState(body([{ ...deployment, revision }]), ID).deployments;
    assert.deepEqual(read!.revision!.resource_spec, { min_scale: 1 });
    assert.deepEqual(read!.revision!.secret_references, revision.secret_references);
  });

  test('another protocol version or another listener is refused whole', () => {
    assert.throws(
      () => readDesiredState({ ...body([]), protocol: 2 } as unknown as WireDesiredState, ID),
      (e: unknown) => e instanceof ProtocolError && /protocol 2 is not supported/.test(e.message),
    );
    assert.throws(() => readDesiredState(body([]), '00000000-0000-4000-8000-000000000000'), /not 00000000/);
    assert.throws(() => readDesiredState('<html>' as unknown as WireDesiredState, ID), /must be a JSON object/);
    assert.throws(
      () => readDesiredState({ ...body([]), deployments: {} } as unknown as WireDesiredState, ID),
      /deployments must be an array/,
    );
  });
});
