/**
 * The world of an agent test: a fake Kubernetes API server, a fake Slipway service, and agents started
 * in-process against both (as many in a row as a test wants: a restart is stop() and start again).
 */
import { randomUUID } from 'node:crypto';
import pino from 'pino';
import type { ListenerConfig } from '@slipway/listener/config';
import { startListener, type ListenerDeps, type RunningListener } from '@slipway/listener/listener-agent';
import { FakeKube, type FakeKubeOptions } from './fake-kube.ts';
import { FakeSlipway, type FakeDeployment, type FakeRevision } from './fake-slipway.ts';

export const NAMESPACE = 'agents';

export interface World {
  kube: FakeKube;
  slipway: FakeSlipway;
  config: ListenerConfig;
  /** Starts an agent; the world stops it at the end if the test did not. */
  start(): RunningListener;
  close(): Promise<void>;
}

export async function startWorld(
  options: FakeKubeOptions = {},
  configured: Partial<ListenerConfig> = {},
  /** The agent's back-off, its wait before believing a 403, its logger and its clock (the harness's otherwise). */
  agentDeps: Pick<
    ListenerDeps,
    | 'backoff'
    | 'clock'
    | 'forbiddenConfirmMs'
    | 'logger'
    | 'missingNamespaceConfirmMs'
    | 'resyncMs'
    | 'gatewayRediscoverMs'
  > = {},
): Promise<World> {
  const listenerId = randomUUID();
  const kube = await FakeKube.start({ namespaces: [NAMESPACE, 'default'], ...options });
  const slipway = await FakeSlipway.start(listenerId, `slwl_${randomUUID().replaceAll('-', '')}`);
  const config: ListenerConfig = {
    slipwayUrl: slipway.url,
    listenerId,
    credential: slipway.credential,
    namespaces: [NAMESPACE],
    kubeconfigPath: null,
    pollWaitSeconds: 30,
    heartbeatSeconds: 30,
    appPort: 8080,
    progressDeadlineSeconds: 600,
    postgresImage: 'postgres:17-alpine',
    redisImage: 'redis:7-alpine',
    logLevel: 'silent',
    ...configured,
  };
  const running = new Set<RunningListener>();
  return {
    kube,
    slipway,
    config,
    start() {
      const agent = startListener(config, {
        kubeConfig: kube.kubeConfig(),
        logger: pino({ level: process.env.LISTENER_TEST_LOG ?? 'silent' }),
        backoff: { baseMs: 50, maxMs: 500 },
        ...agentDeps,
      });
      const handle: RunningListener = {
        async stop() {
          running.delete(handle);
          await agent.stop();
        },
      };
      running.add(handle);
      return handle;
    },
    async close() {
      await Promise.all([...running].map((r) => r.stop()));
      await Promise.all([kube.close(), slipway.close()]);
    },
  };
}

export function revision(fields: Partial<FakeRevision> = {}): FakeRevision {
  return {
    id: randomUUID(),
    status: 'QUEUED',
    image_uri: 'ghcr.io/acme/support-agent:1.4.2',
    secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-test' }],
    secret_references: null,
    resource_spec: null,
    ...fields,
  };
}

export function deployment(fields: Partial<FakeDeployment> = {}): FakeDeployment {
  return {
    deployment_id: randomUUID(),
    name: 'support-agent',
    namespace: NAMESPACE,
    delete: false,
    custom_url: null,
    revision: revision(),
    ...fields,
  };
}
