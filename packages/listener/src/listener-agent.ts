/**
 * The listener agent, in-process: the desired-state long-poll, the cluster's list-watch, the control
 * loop between them and the heartbeat (heartbeat-loop.ts). `startListener` is what `main.ts` runs and
 * what tests (and an end-to-end harness) start with their own fetch and kubeconfig; `stop()` ends every
 * loop and request.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import pino, { type Logger } from 'pino';
import { DEFAULT_FORBIDDEN_CONFIRM_MS, startClusterCache, type ClusterCache } from './cluster-cache.ts';
import type { ListenerConfig } from './config.ts';
import { createGatewayDiscovery, type GatewayDiscovery } from './gateway-discovery.ts';
import { SYSTEM_CLOCK, startHeartbeats, type Heartbeats, type ListenerClock } from './heartbeat-loop.ts';
import { createKubeClient, type KubeClient } from './kube-client.ts';
import { HTTP_ROUTE_KIND, MANAGED_KINDS } from './kube-objects.ts';
import { startController, type Controller } from './listener-controller.ts';
import { createProtocolClient, type Fetch, type ProtocolClient } from './protocol-client.ts';
import { DEFAULT_BACKOFF, createBackoff, sleep, type BackoffOptions } from './retry-backoff.ts';
import { checkServerVersion } from './server-version.ts';
import manifest from '../package.json' with { type: 'json' };

/**
 * The least time between the starts of two desired-state reads. A long-poll normally takes its whole
 * `wait` (or ends with a change); an unchanged answer that comes sooner (SLIPWAY_LISTENER_POLL_SECONDS=0,
 * a replica shutting down, a proxy that answers for the service) must not turn the loop into a flood of
 * requests: with wait 0 the agent reads once a second, as the service re-reads without its change feed.
 */
const MIN_POLL_INTERVAL_MS = 1_000;

const CREDENTIAL_REFUSED = 'the service refused the listener credential (401)';

/** How long a missing namespace may be in the making before the revisions to it fail. */
const DEFAULT_MISSING_NAMESPACE_CONFIRM_MS = 60_000;

/** The version the heartbeat tells: the package's (built into the image's bundle, which has no package.json of its own). */
export const LISTENER_VERSION: string = manifest.version;

export type { ListenerClock };

export interface ListenerDeps {
  /** What sends the requests to the service, under the SDK's retries (default: the global fetch). */
  readonly fetch?: Fetch;
  /** The cluster (default: `config.kubeconfigPath`, or the in-cluster service account). */
  readonly kubeConfig?: KubeConfig;
  readonly logger?: Logger;
  readonly backoff?: BackoffOptions;
  /** A reconcile pass at least this often even without a change (default 60 s). */
  readonly resyncMs?: number;
  /** How long a namespace's lists must keep being answered 403 before its deployments fail (default 15 s). */
  readonly forbiddenConfirmMs?: number;
  /**
   * How long applies must keep being answered 404 for their namespace before the revision fails with
   * `namespace_not_found` (default 60 s: an operator may be creating it).
   */
  readonly missingNamespaceConfirmMs?: number;
  /** What the heartbeat's period is kept by (default: the system's). */
  readonly clock?: ListenerClock;
  /**
   * How often a cluster without the Gateway API is looked at again, at the start of a reconcile pass
   * (default 60 s; passes run at least every `resyncMs`).
   */
  readonly gatewayRediscoverMs?: number;
}

export interface RunningListener {
  stop(): Promise<void>;
}

export function loadKubeConfig(config: ListenerConfig): KubeConfig {
  const kubeConfig = new KubeConfig();
  if (config.kubeconfigPath !== null) kubeConfig.loadFromFile(config.kubeconfigPath);
  else kubeConfig.loadFromCluster();
  return kubeConfig;
}

/** What the agent's loops share: the list-watch once started, and what the last desired-state read met. */
interface AgentState {
  cache: ClusterCache | null;
  /** Why the desired state could not be read last time, for the heartbeat; null when it was. */
  pollProblem: string | null;
}

export function startListener(config: ListenerConfig, deps: ListenerDeps = {}): RunningListener {
  const logger =
    deps.logger ??
    pino({ level: config.logLevel, redact: { paths: ['credential', 'headers.authorization'], censor: '[redacted]' } });
  const backoff = deps.backoff ?? DEFAULT_BACKOFF;
  const stop = new AbortController();
  const protocol = createProtocolClient({
    baseUrl: config.slipwayUrl,
    listenerId: config.listenerId,
    credential: config.credential,
    ...(deps.fetch ? { fetch: deps.fetch } : {}),
  });
  const kube = createKubeClient(deps.kubeConfig ?? loadKubeConfig(config));
  const gateway = createGatewayDiscovery(kube, config, logger, deps.gatewayRediscoverMs);
  const state: AgentState = { cache: null, pollProblem: null };

  const controller = startController({
    protocol,
    kube,
    cache: () => state.cache,
    build: {
      listenerId: config.listenerId,
      appPort: config.appPort,
      progressDeadlineSeconds: config.progressDeadlineSeconds,
      postgresImage: config.postgresImage,
      redisImage: config.redisImage,
    },
    namespaces: config.namespaces,
    logger,
    backoff,
    resyncMs: deps.resyncMs ?? 60_000,
    missingNamespaceConfirmMs: deps.missingNamespaceConfirmMs ?? DEFAULT_MISSING_NAMESPACE_CONFIRM_MS,
    gateway: () => gateway.current(),
    // A cluster that gets the Gateway API later is seen then: its HTTPRoutes are listed and watched from there on.
    beforePass: async () => {
      if (await gateway.refresh()) state.cache?.watchKind(HTTP_ROUTE_KIND);
    },
    routesGone: () => gateway.routesGone(),
  });
  const heartbeats = startHeartbeats({
    config,
    protocol,
    controller,
    logger,
    clock: deps.clock ?? SYSTEM_CLOCK,
    signal: stop.signal,
    version: LISTENER_VERSION,
    cache: () => state.cache,
    pollProblem: () => state.pollProblem,
  });
  const started = startWatching(
    state,
    { config, deps, kube, gateway, controller, heartbeats, logger, backoff },
    stop.signal,
  );
  const polling = pollDesiredState(state, { config, protocol, controller, logger, backoff }, stop.signal);

  logger.info(
    {
      listener_id: config.listenerId,
      service: config.slipwayUrl,
      namespaces: config.namespaces,
      version: LISTENER_VERSION,
    },
    'listener started',
  );
  // Logged once: which Kubernetes this is, and what of the listener an older one cannot do.
  const versionChecked = checkServerVersion(kube, logger);

  return {
    async stop() {
      stop.abort();
      await started;
      await Promise.all([polling, heartbeats.done, controller.stop(), state.cache?.stop(), versionChecked]);
      logger.info('listener stopped');
    },
  };
}

/** The Gateway API is looked for first, then the list-watch starts (which watches HTTPRoutes only where served). */
async function startWatching(
  state: AgentState,
  parts: {
    readonly config: ListenerConfig;
    readonly deps: ListenerDeps;
    readonly kube: KubeClient;
    readonly gateway: GatewayDiscovery;
    readonly controller: Controller;
    readonly heartbeats: Heartbeats;
    readonly logger: Logger;
    readonly backoff: BackoffOptions;
  },
  signal: AbortSignal,
): Promise<void> {
  const { config, gateway, controller } = parts;
  await gateway.refresh();
  if (signal.aborted) return;
  state.cache = startClusterCache({
    client: parts.kube,
    namespaces: config.namespaces,
    kinds: gateway.current().httpRoutes ? [...MANAGED_KINDS, HTTP_ROUTE_KIND] : MANAGED_KINDS,
    onChange: () => controller.wake(),
    onNamespaces: () => {
      controller.wake();
      parts.heartbeats.namespacesChanged();
    },
    logger: parts.logger,
    backoff: parts.backoff,
    forbiddenConfirmMs: parts.deps.forbiddenConfirmMs ?? DEFAULT_FORBIDDEN_CONFIRM_MS,
  });
  controller.wake();
}

/** Long-polls the desired state: each answer is handed to the controller, 304s loop at once. */
async function pollDesiredState(
  state: AgentState,
  parts: {
    readonly config: ListenerConfig;
    readonly protocol: ProtocolClient;
    readonly controller: Controller;
    readonly logger: Logger;
    readonly backoff: BackoffOptions;
  },
  signal: AbortSignal,
): Promise<void> {
  const { config, protocol, controller, logger } = parts;
  const backoff = createBackoff(parts.backoff);
  let etag: string | null = null;
  while (!signal.aborted) {
    try {
      const started = Date.now();
      const answer = await protocol.desiredState(etag, config.pollWaitSeconds, signal);
      if (answer !== 'unchanged') {
        etag = answer.etag;
        controller.setDesired(answer.state);
      }
      state.pollProblem = null;
      backoff.reset();
      // A change is read again at once (the state moves on); an early "unchanged" is not.
      const early = MIN_POLL_INTERVAL_MS - (Date.now() - started);
      if (answer === 'unchanged' && early > 0) await sleep(early, signal);
    } catch (error) {
      if (signal.aborted) break;
      const refused = error instanceof SlipwayError && error.status === 401;
      if (refused && state.pollProblem?.startsWith(CREDENTIAL_REFUSED) !== true) {
        // Loud, once per outage: nothing works until an operator gives the agent a new credential, and
        // the heartbeat that would say so is refused too. The agent keeps trying (the service may be
        // answering for another reason, behind a misconfigured proxy), at the back-off's slowest pace.
        logger.error(
          { listener_id: config.listenerId, err: error.message },
          `${CREDENTIAL_REFUSED}: it was revoked, or is not this listener's. Make a new one (POST /v2/listeners/{id}/credentials), put it in the agent's Secret and restart the agent`,
        );
      }
      state.pollProblem = refused
        ? `${CREDENTIAL_REFUSED}: ${error.message}`
        : error instanceof Error
          ? error.message
          : String(error);
      if (!refused)
        logger.warn({ err: state.pollProblem }, 'could not read the desired state; trying again after a back-off');
      // A fresh read after a failure: the answer that failed may have been half a body.
      etag = null;
      await sleep(refused ? parts.backoff.maxMs : backoff.next(), signal);
    }
  }
}
