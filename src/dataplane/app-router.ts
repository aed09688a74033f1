/**
 * The built-in app edge's router (src/dataplane/app-edge.ts, used when HAProxy is not installed). Each app
 * process listens on its own 127.0.0.1 port; the router serves it at its host name (see app-urls.ts) and
 * switches between instances without losing requests: `setTargets` changes the table at once and then
 * waits for the requests already sent to the old instances, so the caller stops those only when they
 * are idle.
 *
 * This module matches requests to apps and keeps the routing table; the table's in-flight accounting
 * and drain are in app-backends.ts, the proxying (http-proxy-3, safe retries) in app-proxy.ts, the
 * error answers in the API's shape in app-error-answers.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import {
  drain,
  newBackend,
  pick,
  servedBy,
  splitCookieOf,
  splitRouteKey,
  targetKey,
  whenIdle,
  NO_INSTANCE_YET,
  SCALED_TO_ZERO,
  type AppTarget,
  type Backend,
  type Route,
  type RouteSplit,
  type SetTargetsOptions,
} from './app-backends.ts';
import { createSplitChooser } from './split-choice.ts';
import { edgeAnswered, sendError, sendSocketError } from './app-error-answers.ts';
import { createAppProxy, type AppRequest } from './app-proxy.ts';
import { slugFromHost } from './app-urls.ts';
import { createStatsCounter, type EdgeAppStats } from './edge-stats.ts';
import type { TrafficSeries } from './traffic-series.ts';

export interface AppRouter {
  /**
   * Routes the slug to these targets (round-robin). The table changes at once; the promise resolves when
   * every request that was in flight to targets no longer listed has finished, or after drainTimeoutMs.
   */
  setTargets(slug: string, targets: AppTarget[], options?: SetTargetsOptions): Promise<void>;
  /** Stops routing the slug; resolves when its in-flight requests are drained (or the timeout). */
  remove(slug: string, options?: { drainTimeoutMs?: number }): Promise<void>;
  /** Splits the slug's traffic with a second revision's targets, or ends the split (null); see AppRoutes. */
  setSplit(slug: string, split: RouteSplit | null, options?: { drainTimeoutMs?: number }): Promise<void>;
  targets(slug: string): AppTarget[];
  /** What was counted for each routed app (src/dataplane/edge-stats.ts). */
  stats(): Map<string, EdgeAppStats>;
  /** The LangGraph thread pins of traffic splits held now (at most `threadPins`). */
  threadPins(): number;
  /** Handles the request when it is for an app (Host `<slug>.<appsDomain>`); returns false otherwise. */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /** Same for WebSocket upgrades; other upgrades (h2c) return false and are served as plain requests. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
  /**
   * Stops serving apps (503 from then on): open WebSockets are closed at once, in-flight requests get
   * drainTimeoutMs to finish and are cut after that. Idempotent.
   */
  close(): Promise<void>;
}

export interface AppRouterOptions {
  appsDomain: string;
  logger: Logger;
  /** Default wait for in-flight requests in setTargets, remove and close. */
  drainTimeoutMs: number;
  /** X-Forwarded-Proto on plain connections: `https` when a proxy in front of the edge terminates TLS. */
  forwardedProto?: 'http' | 'https';
  /** Where each request is recorded, by route and revision (src/dataplane/traffic-series.ts). */
  traffic?: TrafficSeries;
  /** The most LangGraph thread pins of traffic splits held at once (src/dataplane/split-choice.ts). */
  threadPins?: number;
}

function isWebSocket(req: IncomingMessage): boolean {
  return req.method === 'GET' && req.headers.upgrade?.toLowerCase() === 'websocket';
}

/** The app a request's host names, or null when it names none. */
function matchApp(req: IncomingMessage, appsDomain: string): AppRequest | null {
  const slug = slugFromHost(req.headers.host, appsDomain);
  return slug === null ? null : { slug, url: req.url ?? '/' };
}

/** Counts the request for its app, and in the traffic series by revision, once its answer is sent. */
function countWhenFinished(
  res: ServerResponse,
  label: string,
  counter: ReturnType<typeof createStatsCounter>,
  traffic: TrafficSeries | undefined,
): void {
  const started = process.hrtime.bigint();
  res.once('finish', () => {
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    counter.record(res.statusCode, seconds);
    traffic?.record({
      label,
      // The edge's own answers too, when an instance was picked (it refused): the revision's failure.
      revisionId: servedBy.get(res)?.revisionId ?? null,
      status: res.statusCode,
      seconds,
      edgeAnswer: edgeAnswered.has(res),
    });
  });
}

export function createAppRouter(options: AppRouterOptions): AppRouter {
  const { appsDomain, logger } = options;
  const routes = new Map<string, Route>();
  /** Every backend that is routed to or still draining, for close(). */
  const backends = new Set<Backend>();
  const proxy = createAppProxy({ logger, forwardedProto: options.forwardedProto ?? 'http', routes });
  /** Each routed app's count; it goes with the route. */
  const counters = new Map<string, ReturnType<typeof createStatsCounter>>();
  /** Routes with a traffic split: their second revision is the route at splitRouteKey(slug). */
  const splits = new Map<string, RouteSplit>();
  const chooser = createSplitChooser(Math.random, options.threadPins);
  let closing: Promise<void> | null = null;

  function addBackend(target: AppTarget): Backend {
    const backend = newBackend(target);
    backends.add(backend);
    return backend;
  }

  const match = (req: IncomingMessage) => matchApp(req, appsDomain);

  function serve(req: IncomingMessage, res: ServerResponse, app: AppRequest): void {
    if (closing !== null)
      return sendError(req, res, 503, 'unavailable', 'The service is shutting down; retry shortly.');
    const route = routes.get(app.slug);
    if (route === undefined) return sendError(req, res, 404, 'not_found', `No deployment is served at ${app.slug}.`);
    // Counted for the app from here, the edge's own answers (no instance, none answered) included.
    const counter = counters.get(app.slug);
    if (counter) countWhenFinished(res, app.slug, counter, options.traffic);
    if (route.backends.length === 0)
      return sendError(
        req,
        res,
        503,
        'unavailable',
        `Deployment ${app.slug} ${route.scaledToZero ? SCALED_TO_ZERO : NO_INSTANCE_YET}.`,
      );
    proxy.web(req, res, splitTarget(req, res, app));
  }

  /** The route that serves the request: the split's second one when the split picks it. */
  function splitTarget(req: IncomingMessage, res: ServerResponse | null, app: AppRequest): AppRequest {
    const split = splits.get(app.slug);
    if (split === undefined) return app;
    const { side, cookie } = chooser.choose(app.slug, split, req);
    if (cookie !== null && res !== null) splitCookieOf.set(res, cookie);
    return side === 'split' && routes.has(splitRouteKey(app.slug)) ? { ...app, route: splitRouteKey(app.slug) } : app;
  }

  const router: AppRouter = {
    setTargets(slug, targets, opts) {
      const invalid = targets.find((t) => !Number.isInteger(t.port) || t.port < 1 || t.port > 65535);
      if (invalid !== undefined)
        return Promise.reject(
          new Error(`app target ${invalid.instanceId} has no valid port (${invalid.port}); the route is unchanged`),
        );
      const route = routes.get(slug) ?? { backends: [], next: 0 };
      const current = new Map(route.backends.map((b) => [targetKey(b.target), b]));
      const next = new Map<string, Backend>();
      for (const target of targets) {
        const key = targetKey(target);
        if (!next.has(key)) next.set(key, current.get(key) ?? addBackend(target));
      }
      const removed = route.backends.filter((b) => !next.has(targetKey(b.target)));
      route.backends = [...next.values()];
      route.next = route.backends.length === 0 ? 0 : route.next % route.backends.length;
      route.scaledToZero = route.backends.length === 0 && opts?.scaledToZero === true;
      routes.set(slug, route);
      if (!counters.has(slug)) counters.set(slug, createStatsCounter());
      logger.debug(
        { slug, targets: route.backends.map((b) => b.target), draining: removed.map((b) => b.target) },
        'app route set',
      );
      opts?.onSwitched?.();
      return drain(logger, backends, slug, removed, opts?.drainTimeoutMs ?? options.drainTimeoutMs);
    },

    async setSplit(slug, split, opts) {
      const key = splitRouteKey(slug);
      const before = splits.get(slug);
      if (split === null) {
        splits.delete(slug);
        chooser.forget(slug);
        return router.remove(key, opts);
      }
      if (before && (before.revisionId !== split.revisionId || before.baseRevisionId !== split.baseRevisionId))
        chooser.forget(slug);
      // The second revision's instances are routed before any request is sent there.
      const done = router.setTargets(key, split.targets, opts);
      counters.delete(key);
      splits.set(slug, { ...split, targets: split.targets.map((t) => ({ ...t })) });
      return done;
    },

    remove(slug, opts) {
      const route = routes.get(slug);
      if (route === undefined) return Promise.resolve();
      routes.delete(slug);
      counters.delete(slug);
      logger.debug({ slug }, 'app route removed');
      return drain(logger, backends, slug, route.backends, opts?.drainTimeoutMs ?? options.drainTimeoutMs);
    },

    targets(slug) {
      return (routes.get(slug)?.backends ?? []).map((b) => ({ ...b.target }));
    },

    stats() {
      return new Map([...counters].map(([slug, counter]) => [slug, counter.read()]));
    },

    threadPins: () => chooser.size(),

    handle(req, res) {
      const app = match(req);
      if (app === null) return false;
      try {
        serve(req, res, app);
      } catch (error) {
        logger.error({ err: error, slug: app.slug }, 'app request failed in the router');
        sendError(req, res, 500, 'internal', 'Internal server error');
      }
      return true;
    },

    upgrade(req, socket, head) {
      if (!isWebSocket(req)) return false;
      const app = match(req);
      if (app === null) return false;
      socket.on('error', (error) => logger.debug({ err: error, slug: app.slug }, 'app WebSocket client error'));
      const served = closing === null && routes.has(app.slug) ? splitTarget(req, null, app) : app;
      const route = closing === null ? routes.get(served.route ?? app.slug) : undefined;
      const backend = route === undefined ? null : pick(route, new Set());
      if (closing !== null)
        sendSocketError(req, socket, 503, 'unavailable', 'The service is shutting down; retry shortly.');
      else if (route === undefined)
        sendSocketError(req, socket, 404, 'not_found', `No deployment is served at ${app.slug}.`);
      else if (backend === null)
        sendSocketError(
          req,
          socket,
          503,
          'unavailable',
          `Deployment ${app.slug} ${route.scaledToZero ? SCALED_TO_ZERO : NO_INSTANCE_YET}.`,
        );
      else proxy.ws(req, socket, head, app, backend);
      return true;
    },

    close() {
      closing ??= (async () => {
        for (const backend of backends) for (const socket of backend.sockets) socket.destroy();
        const busy = [...backends];
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          Promise.all(busy.map(whenIdle)),
          new Promise<void>((resolve) => (timer = setTimeout(resolve, options.drainTimeoutMs))),
        ]);
        clearTimeout(timer);
        for (const backend of busy) for (const res of backend.responses) res.destroy();
        routes.clear();
        backends.clear();
        proxy.close();
      })();
      return closing;
    },
  };
  return router;
}
