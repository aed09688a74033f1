/**
 * The listener agent, in-process: the desired-state long-poll, the cluster's list-watch, the control
 * loop between them and the heartbeat. `startListener` is what `main.ts` runs and what tests (and an
 * end-to-end harness) start with their own fetch and kubeconfig; `stop()` ends every loop and request.
 */
import { createRequire } from 'node:module';
import { KubeConfig } from '@kubernetes/client-node';
import pino, { type Logger } from 'pino';
import { startClusterCache, type ClusterCache } from './cluster-cache.ts';
import type { ListenerConfig } from './config.ts';
import { createKubeClient } from './kube-client.ts';
import { startController } from './listener-controller.ts';
import { createProtocolClient, type Fetch } from './protocol-client.ts';
import { DEFAULT_BACKOFF, createBackoff, sleep, type BackoffOptions } from './retry-backoff.ts';

/**
 * The least time between the starts of two desired-state reads. A long-poll normally takes its whole
 * `wait` (or ends with a change); an unchanged answer that comes sooner (SLIPWAY_LISTENER_POLL_SECONDS=0,
 * a replica shutting down, a proxy that answers for the service) must not turn the loop into a flood of
 * requests: with wait 0 the agent reads once a second, as the service re-reads without its change feed.
 */
const MIN_POLL_INTERVAL_MS = 1_000;

export const LISTENER_VERSION: string = (createRequire(import.meta.url)('../package.json') as { version: string })
  .version;

export interface ListenerDeps {
  /** The HTTP client for the service (default: the global fetch). */
  readonly fetch?: Fetch;
  /** The cluster (default: `config.kubeconfigPath`, or the in-cluster service account). */
  readonly kubeConfig?: KubeConfig;
  readonly logger?: Logger;
  readonly backoff?: BackoffOptions;
  /** A reconcile pass at least this often even without a change (default 60 s). */
  readonly resyncMs?: number;
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

export function startListener(config: ListenerConfig, deps: ListenerDeps = {}): RunningListener {
  const logger =
    deps.logger ??
    pino({ level: config.logLevel, redact: { paths: ['credential', 'headers.authorization'], censor: '[redacted]' } });
  const backoffOptions = deps.backoff ?? DEFAULT_BACKOFF;
  const stop = new AbortController();
  const protocol = createProtocolClient({
    baseUrl: config.slipwayUrl,
    listenerId: config.listenerId,
    credential: config.credential,
    fetch: deps.fetch ?? globalThis.fetch,
  });
  const kube = createKubeClient(deps.kubeConfig ?? loadKubeConfig(config));
  let pollProblem: string | null = null;
  let clusterProblem: string | null = null;
  let cache: ClusterCache | null = null;

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
  });
  cache = startClusterCache({
    client: kube,
    namespaces: config.namespaces,
    onChange: () => controller.wake(),
    onProblem: (problem) => {
      clusterProblem = problem;
    },
    logger,
    backoff: backoffOptions,
  });

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
        pollProblem = error instanceof Error ? error.message : String(error);
        logger.warn({ err: pollProblem }, 'could not read the desired state; trying again after a back-off');
        // A fresh read after a failure: the answer that failed may have been half a body.
        etag = null;
        await sleep(backoff.next(), stop.signal);
      }
    }
  })();

  /** Tells the service the agent is alive, which namespaces it watches, and what is wrong if anything. */
  const heartbeats = (async () => {
    while (!stop.signal.aborted) {
      const problem = pollProblem ?? clusterProblem ?? controller.problem();
      try {
        await protocol.heartbeat(
          {
            version: LISTENER_VERSION,
            namespaces: config.namespaces,
            message: (problem ?? controller.summary()).slice(0, 1000),
          },
          stop.signal,
        );
      } catch (error) {
        if (stop.signal.aborted) break;
        logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'heartbeat failed');
      }
      await sleep(config.heartbeatSeconds * 1000, stop.signal);
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

  return {
    async stop() {
      stop.abort();
      await Promise.all([polling, heartbeats, controller.stop(), cache?.stop()]);
      logger.info('listener stopped');
    },
  };
}
