/**
 * The listener agent, in-process: the desired-state long-poll, the cluster's list-watch, the control
 * loop between them and the heartbeat. `startListener` is what `main.ts` runs and what tests (and an
 * end-to-end harness) start with their own fetch and kubeconfig; `stop()` ends every loop and request.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import pino, { type Logger } from 'pino';
import {
  DEFAULT_FORBIDDEN_CONFIRM_MS,
  startClusterCache,
  type ClusterCache,
  type NamespaceWatch,
} from './cluster-cache.ts';
import type { ListenerConfig } from './config.ts';
import { createGatewayDiscovery } from './gateway-discovery.ts';
import { createKubeClient } from './kube-client.ts';
import { HTTP_ROUTE_KIND, MANAGED_KINDS } from './kube-objects.ts';
import { startController } from './listener-controller.ts';
import { createProtocolClient, type Fetch } from './protocol-client.ts';
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

/** The least time between two heartbeats, when a namespace's state changes sooner than the period. */
const MIN_HEARTBEAT_GAP_MS = 1_000;

/** The version the heartbeat tells: the package's (built into the image's bundle, which has no package.json of its own). */
export const LISTENER_VERSION: string = manifest.version;

/** The time the heartbeat keeps (a fake one in tests, which count heartbeats over a period). */
export interface ListenerClock {
  now(): number;
  setTimeout(fire: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const SYSTEM_CLOCK: ListenerClock = {
  now: () => Date.now(),
  setTimeout: (fire, ms) => setTimeout(fire, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

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

function describeWatch(watch: NamespaceWatch | undefined): string {
  switch (watch?.state) {
    case 'refused':
      return `the Kubernetes API server forbids it, deployments there fail (${watch.reason})`;
    case 'failing':
      return `it cannot be listed yet, deployments there wait (${watch.reason})`;
    default:
      return 'not listed yet';
  }
}

export function startListener(config: ListenerConfig, deps: ListenerDeps = {}): RunningListener {
  const logger =
    deps.logger ??
    pino({ level: config.logLevel, redact: { paths: ['credential', 'headers.authorization'], censor: '[redacted]' } });
  const backoffOptions = deps.backoff ?? DEFAULT_BACKOFF;
  const clock = deps.clock ?? SYSTEM_CLOCK;
  const stop = new AbortController();
  const protocol = createProtocolClient({
    baseUrl: config.slipwayUrl,
    listenerId: config.listenerId,
    credential: config.credential,
    ...(deps.fetch ? { fetch: deps.fetch } : {}),
  });
  const kube = createKubeClient(deps.kubeConfig ?? loadKubeConfig(config));
  const gateway = createGatewayDiscovery(kube, config, logger, deps.gatewayRediscoverMs);
  let pollProblem: string | null = null;
  // Started once the Gateway API is discovered (below); assigned in that closure, hence the cast.
  let cache = null as ClusterCache | null;
  /** Ends the heartbeat's sleep: what it says changed (a namespace is watched now, or no longer). */
  let beatNow: (() => void) | null = null;

  const controller = startController({
    protocol,
    kube,
    cache: () => cache,
    build: {
      listenerId: config.listenerId,
      appPort: config.appPort,
      progressDeadlineSeconds: config.progressDeadlineSeconds,
      postgresImage: config.postgresImage,
      redisImage: config.redisImage,
    },
    namespaces: config.namespaces,
    logger,
    backoff: backoffOptions,
    resyncMs: deps.resyncMs ?? 60_000,
    missingNamespaceConfirmMs: deps.missingNamespaceConfirmMs ?? DEFAULT_MISSING_NAMESPACE_CONFIRM_MS,
    gateway: () => gateway.current(),
    // A cluster that gets the Gateway API later is seen then: its HTTPRoutes are listed and watched from there on.
    beforePass: async () => {
      if (await gateway.refresh()) cache?.watchKind(HTTP_ROUTE_KIND);
    },
    routesGone: () => gateway.routesGone(),
  });
  /** The Gateway API is looked for first, before the list-watch starts (which watches HTTPRoutes only where served). */
  const started = (async () => {
    await gateway.refresh();
    if (stop.signal.aborted) return;
    cache = startClusterCache({
      client: kube,
      namespaces: config.namespaces,
      kinds: gateway.current().httpRoutes ? [...MANAGED_KINDS, HTTP_ROUTE_KIND] : MANAGED_KINDS,
      onChange: () => controller.wake(),
      onNamespaces: () => {
        controller.wake();
        beatNow?.();
      },
      logger,
      backoff: backoffOptions,
      forbiddenConfirmMs: deps.forbiddenConfirmMs ?? DEFAULT_FORBIDDEN_CONFIRM_MS,
    });
    controller.wake();
  })();

  /** Long-polls the desired state: each answer is handed to the controller, 304s loop at once. */
  const polling = (async () => {
    const backoff = createBackoff(backoffOptions);
    let etag: string | null = null;
    while (!stop.signal.aborted) {
      try {
        const started = Date.now();
        const answer = await protocol.desiredState(etag, config.pollWaitSeconds, stop.signal);
        if (answer !== 'unchanged') {
          etag = answer.etag;
          controller.setDesired(answer.state);
        }
        pollProblem = null;
        backoff.reset();
        // A change is read again at once (the state moves on); an early "unchanged" is not.
        const early = MIN_POLL_INTERVAL_MS - (Date.now() - started);
        if (answer === 'unchanged' && early > 0) await sleep(early, stop.signal);
      } catch (error) {
        if (stop.signal.aborted) break;
        const refused = error instanceof SlipwayError && error.status === 401;
        if (refused && pollProblem?.startsWith(CREDENTIAL_REFUSED) !== true) {
          // Loud, once per outage: nothing works until an operator gives the agent a new credential, and
          // the heartbeat that would say so is refused too. The agent keeps trying (the service may be
          // answering for another reason, behind a misconfigured proxy), at the back-off's slowest pace.
          logger.error(
            { listener_id: config.listenerId, err: error.message },
            `${CREDENTIAL_REFUSED}: it was revoked, or is not this listener's. Make a new one (POST /v2/listeners/{id}/credentials), put it in the agent's Secret and restart the agent`,
          );
        }
        pollProblem = refused
          ? `${CREDENTIAL_REFUSED}: ${error.message}`
          : error instanceof Error
            ? error.message
            : String(error);
        if (!refused)
          logger.warn({ err: pollProblem }, 'could not read the desired state; trying again after a back-off');
        // A fresh read after a failure: the answer that failed may have been half a body.
        etag = null;
        await sleep(refused ? backoffOptions.maxMs : backoff.next(), stop.signal);
      }
    }
  })();

  /**
   * Tells the service the agent is alive, which namespaces it actually watches, and what is wrong if
   * anything: first of all the namespaces it does not watch, and why. The first heartbeat waits for
   * every namespace's first answer (or one heartbeat period), so that a namespace about to be listed
   * is not reported missing; after that, a namespace that comes or goes is reported at once.
   */
  const heartbeats = (async () => {
    const settled = () =>
      cache !== null && [...cache.namespaces().values()].every((watch) => watch.state !== 'starting');
    /**
     * Waits `ms` on the clock, or until the cache says a namespace changed and `until()` then holds.
     * Only a change ends it early: a pause called while `until()` already holds still waits (with
     * `() => true` it returned at once, and the loop heartbeated every MIN_HEARTBEAT_GAP_MS).
     */
    const pause = (ms: number, until: () => boolean = () => false) =>
      new Promise<void>((resolve) => {
        const done = () => {
          clock.clearTimeout(timer);
          stop.signal.removeEventListener('abort', done);
          beatNow = null;
          resolve();
        };
        const timer = clock.setTimeout(done, ms);
        beatNow = () => {
          if (until()) done();
        };
        stop.signal.addEventListener('abort', done, { once: true });
        if (stop.signal.aborted) done();
      });
    if (!settled()) await pause(config.heartbeatSeconds * 1000, settled);
    let lastNotWatched = '';
    while (!stop.signal.aborted) {
      const watches = cache?.namespaces() ?? new Map<string, NamespaceWatch>();
      const watched = config.namespaces.filter((ns) => watches.get(ns)?.state === 'watched');
      const notWatched = config.namespaces
        .filter((ns) => !watched.includes(ns))
        .map((ns) => `namespace ${ns} is not watched: ${describeWatch(watches.get(ns))}`);
      if (notWatched.join() !== lastNotWatched) {
        lastNotWatched = notWatched.join();
        if (notWatched.length > 0)
          logger.error({ namespaces_not_watched: notWatched }, 'some namespaces are not watched');
      }
      const problems = [...notWatched, pollProblem, cache?.problem() ?? null, controller.problem()].filter(
        (p): p is string => p !== null,
      );
      const conditions = controller.conditions();
      try {
        await protocol.heartbeat(
          {
            version: LISTENER_VERSION,
            namespaces: watched,
            message: (problems.length > 0 ? problems.join('; ') : controller.summary()).slice(0, 1000),
            ...(conditions === null
              ? {}
              : { deployments: [...conditions.deployments], observed_at: conditions.observedAt.toISOString() }),
          },
          stop.signal,
        );
      } catch (error) {
        if (stop.signal.aborted) break;
        logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'heartbeat failed');
      }
      const sent = clock.now();
      await pause(config.heartbeatSeconds * 1000, () => true);
      // A namespace that flaps between states must not turn the heartbeat into a flood.
      const early = MIN_HEARTBEAT_GAP_MS - (clock.now() - sent);
      if (early > 0) await pause(early);
    }
  })();

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
      await Promise.all([polling, heartbeats, controller.stop(), cache?.stop(), versionChecked]);
      logger.info('listener stopped');
    },
  };
}
