/**
 * The instances that serve a deployment's endpoints on the own data plane (docs/app-urls.md,
 * "Endpoints"), keyed by deployment and endpoint, beside the deployment's own (src/dataplane/local-runtime.ts).
 * Each endpoint is a route of the edge of its own, at the label `<slug>--<name>` (src/domain/endpoints.ts).
 *
 * A move starts the new revision's instances while the old ones serve, waits for their health check,
 * switches the route (new requests go to the new instances at once), waits for the requests in flight to
 * the old ones (up to the drain time), and only then stops those: no request is refused during a move.
 * A start that fails leaves what served there serving, and is not tried again until the endpoint is
 * moved, or the service restarts.
 *
 * A traffic split (docs/app-urls.md, "Traffic split") starts its second revision's instances beside the
 * endpoint's, and gives the edge their route with the weight once they are healthy; a promotion of that
 * revision hands the endpoint to those same instances (no new start).
 */
import type { Logger } from 'pino';
import { endpointLabel } from '../domain/endpoints.ts';
import type { AppTarget } from './app-backends.ts';
import type { AppRoutes } from './app-edge.ts';
import { createEndpointSplitApps } from './endpoint-split-apps.ts';
import type { EndpointOutcome, RevisionJob, WantedEndpoint } from './local-runtime-types.ts';

/** What the runtime's started instances offer here. */
export interface EndpointApp {
  revisionId: string;
  slug: string;
  supervisor: { readonly webTargets: AppTarget[] };
}

export interface EndpointAppsDeps<App extends EndpointApp> {
  edge: AppRoutes;
  logger: Logger;
  drainTimeoutMs: number;
  /** Starts the revision's instances for the endpoint and waits for their health check. */
  start(job: RevisionJob, endpoint: string, signal: AbortSignal): Promise<App>;
  /** Stops the instances and releases what they held. */
  release(deploymentId: string, app: App): Promise<void>;
  /**
   * Removes the data of the deployment's pull-request previews but those of `keep` (their numbers): called
   * once the instances of endpoints no longer wanted are stopped, so a closed preview's data goes with it.
   */
  removePreviewData(deploymentId: string, keep: ReadonlySet<number>): Promise<void>;
  /** Tracks work on a revision's files, so a deletion waits for it (src/dataplane/app-work-tracking.ts). */
  track<T>(deploymentId: string, revisionId: string, work: Promise<T>): Promise<T>;
}

type Report = (outcome: EndpointOutcome) => Promise<void>;

export function createEndpointApps<App extends EndpointApp>(deps: EndpointAppsDeps<App>) {
  const { edge, logger } = deps;
  /** Serving endpoint instances, by deployment, then by endpoint name. */
  const serving = new Map<string, Map<string, App>>();
  /** Revisions that failed to start at an endpoint (`<deployment>/<endpoint>` to revision): not retried. */
  const failed = new Map<string, string>();
  /** Per deployment: the pass under way, and the latest request made while it ran. */
  const passes = new Map<string, { work: Promise<void>; next: { wanted: WantedEndpoint[]; report: Report } | null }>();
  /** Aborts starts under way when their deployment stops. */
  const aborts = new Map<string, AbortController>();
  const appsOf = (deploymentId: string): Map<string, App> => {
    let map = serving.get(deploymentId);
    if (!map) serving.set(deploymentId, (map = new Map<string, App>()));
    return map;
  };
  const splitApps = createEndpointSplitApps(deps, { serving, appsOf });

  async function stopOne(deploymentId: string, name: string, app: App, drainTimeoutMs: number): Promise<void> {
    serving.get(deploymentId)?.delete(name);
    await splitApps.stopSplit(deploymentId, name, drainTimeoutMs);
    await edge.remove(endpointLabel(app.slug, name), { drainTimeoutMs });
    await deps.release(deploymentId, app);
  }

  async function moveOne(
    deploymentId: string,
    want: WantedEndpoint,
    report: Report,
    signal: AbortSignal,
  ): Promise<void> {
    const key = `${deploymentId}/${want.name}`;
    const current = serving.get(deploymentId)?.get(want.name);
    if (current?.revisionId === want.job.revisionId || failed.get(key) === want.job.revisionId) return;
    if (await splitApps.promoteSplit(deploymentId, want, report)) return;
    let next: App;
    try {
      next = await deps.track(deploymentId, want.job.revisionId, deps.start(want.job, want.name, signal));
    } catch (error) {
      if (signal.aborted) return;
      failed.set(key, want.job.revisionId);
      const message = error instanceof Error ? error.message : String(error);
      logger.warn(
        { deploymentId, endpoint: want.name, revisionId: want.job.revisionId, err: error },
        'endpoint start failed',
      );
      await report({ endpoint: want.name, revisionId: want.job.revisionId, served: false, message });
      return;
    }
    if (signal.aborted) {
      await deps.release(deploymentId, next);
      return;
    }
    failed.delete(key);
    appsOf(deploymentId).set(want.name, next);
    // The switch: new requests go to the new instances once this resolves, after the old instances'
    // requests in flight have finished (or the drain time ran out); only then are those stopped.
    await edge.setTargets(endpointLabel(next.slug, want.name), next.supervisor.webTargets, {
      drainTimeoutMs: deps.drainTimeoutMs,
    });
    if (current) await deps.release(deploymentId, current);
    await report({
      endpoint: want.name,
      revisionId: want.job.revisionId,
      fromRevisionId: current?.revisionId ?? null,
      served: true,
    });
  }

  async function pass(deploymentId: string, wanted: WantedEndpoint[], report: Report): Promise<void> {
    const controller = aborts.get(deploymentId) ?? new AbortController();
    aborts.set(deploymentId, controller);
    const names = new Set(wanted.map((w) => w.name));
    for (const [name, app] of [...(serving.get(deploymentId) ?? [])])
      if (!names.has(name)) await stopOne(deploymentId, name, app, deps.drainTimeoutMs);
    // Whatever serves a preview's revision (its pull request's endpoint, or one it was promoted to) keeps
    // its data; a closed pull request's goes now that its instances are stopped.
    const previews = new Set(wanted.flatMap((w) => w.job.snapshot.preview?.pull_request ?? []));
    await deps
      .removePreviewData(deploymentId, previews)
      .catch((error: unknown) => logger.error({ err: error, deploymentId }, 'could not remove the data of a preview'));
    for (const key of [...failed.keys()])
      if (key.startsWith(`${deploymentId}/`) && !names.has(key.slice(deploymentId.length + 1))) failed.delete(key);
    splitApps.forgetFailures(deploymentId, names);
    // One endpoint at a time: each start takes the instances of a whole deployment.
    for (const want of wanted) {
      if (controller.signal.aborted) return;
      await moveOne(deploymentId, want, report, controller.signal).catch((error: unknown) =>
        logger.error({ err: error, deploymentId, endpoint: want.name }, 'could not serve an endpoint'),
      );
      if (controller.signal.aborted) return;
      await splitApps
        .splitOne(deploymentId, want, report, controller.signal)
        .catch((error: unknown) =>
          logger.error({ err: error, deploymentId, endpoint: want.name }, "could not serve an endpoint's split"),
        );
    }
  }

  return {
    /** Brings the deployment's endpoints to `wanted`; see LocalRuntime.serveEndpoints. */
    serve(deploymentId: string, wanted: WantedEndpoint[], report: Report): Promise<void> {
      const running = passes.get(deploymentId);
      if (running) {
        running.next = { wanted, report };
        return running.work;
      }
      const entry: { work: Promise<void>; next: { wanted: WantedEndpoint[]; report: Report } | null } = {
        work: Promise.resolve(),
        next: null,
      };
      entry.work = (async () => {
        try {
          await pass(deploymentId, wanted, report);
          while (entry.next) {
            const { wanted: latest, report: latestReport } = entry.next;
            entry.next = null;
            await pass(deploymentId, latest, latestReport);
          }
        } finally {
          passes.delete(deploymentId);
        }
      })();
      passes.set(deploymentId, entry);
      return entry.work;
    },

    /** Stops every endpoint of the deployment: starts under way are aborted, serving instances drained. */
    async stopAll(deploymentId: string): Promise<void> {
      aborts.get(deploymentId)?.abort(new Error('the deployment stops here'));
      aborts.delete(deploymentId);
      const running = passes.get(deploymentId);
      if (running) {
        running.next = null;
        await running.work.catch(() => undefined);
      }
      for (const [name, app] of [...(serving.get(deploymentId) ?? [])])
        await stopOne(deploymentId, name, app, deps.drainTimeoutMs);
      serving.delete(deploymentId);
      splitApps.forget(deploymentId);
      for (const key of [...failed.keys()]) if (key.startsWith(`${deploymentId}/`)) failed.delete(key);
      splitApps.forgetFailures(deploymentId);
    },

    /** Every endpoint's instances serving here (for /metrics). */
    all(): { deploymentId: string; name: string; app: App }[] {
      return [
        ...[...serving].flatMap(([deploymentId, byName]) =>
          [...byName].map(([name, app]) => ({ deploymentId, name, app })),
        ),
        // A split's second revision: the same endpoint, told apart by its revision.
        ...splitApps.all(),
      ];
    },

    /** The endpoints served here, by deployment: name to revision. */
    served(deploymentId: string): Map<string, string> {
      return new Map([...(serving.get(deploymentId) ?? [])].map(([name, app]) => [name, app.revisionId]));
    },
  };
}
