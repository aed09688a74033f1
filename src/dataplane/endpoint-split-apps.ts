/**
 * The traffic splits of the endpoints served on the own data plane (docs/app-urls.md, "Traffic split"):
 * a split's second revision started from its sealed build beside the endpoint's instances, given its
 * weight at the edge once healthy, re-weighted, replaced, ended, or handed the whole endpoint when that
 * revision is promoted (no new start). Part of endpoint-apps.ts, which owns the endpoints' own instances.
 */
import type { Logger } from 'pino';
import { endpointLabel } from '../domain/endpoints.ts';
import type { EndpointApp, EndpointAppsDeps } from './endpoint-apps.ts';
import type { EndpointOutcome, WantedEndpoint } from './local-runtime-types.ts';

type Report = (outcome: EndpointOutcome) => Promise<void>;

interface ServedSplit<App> {
  app: App;
  weight: number;
  baseRevisionId: string;
}

/** What the endpoints' module shares: its serving instances, by deployment then endpoint. */
export interface EndpointServing<App> {
  serving: Map<string, Map<string, App>>;
  appsOf(this: void, deploymentId: string): Map<string, App>;
}

export function createEndpointSplitApps<App extends EndpointApp>(
  deps: EndpointAppsDeps<App>,
  { serving, appsOf }: EndpointServing<App>,
) {
  const { edge } = deps;
  const logger: Logger = deps.logger;
  /** Traffic splits served: the second revision's instances and weight, by deployment, then endpoint. */
  const splits = new Map<string, Map<string, ServedSplit<App>>>();
  /** Split revisions that failed to start (`<deployment>/<endpoint>` to revision): not retried. */
  const failedSplits = new Map<string, string>();

  /** Ends the endpoint's split here: every client to its revision, the second revision's instances drained and stopped. */
  async function stopSplit(deploymentId: string, name: string, drainTimeoutMs: number): Promise<App | null> {
    const split = splits.get(deploymentId)?.get(name);
    if (!split) return null;
    splits.get(deploymentId)?.delete(name);
    await edge.setSplit(endpointLabel(split.app.slug, name), null, { drainTimeoutMs });
    await deps.release(deploymentId, split.app);
    return split.app;
  }

  /**
   * Promotion of the split's revision: its instances, started and healthy, serve the whole endpoint
   * (the base's drain, then the split's route ends; no request is refused). True when it was that.
   */
  async function promoteSplit(deploymentId: string, want: WantedEndpoint, report: Report): Promise<boolean> {
    const split = splits.get(deploymentId)?.get(want.name);
    if (!split || split.app.revisionId !== want.job.revisionId) return false;
    const current = serving.get(deploymentId)?.get(want.name);
    splits.get(deploymentId)?.delete(want.name);
    appsOf(deploymentId).set(want.name, split.app);
    const label = endpointLabel(split.app.slug, want.name);
    await edge.setTargets(label, split.app.supervisor.webTargets, { drainTimeoutMs: deps.drainTimeoutMs });
    await edge.setSplit(label, null, { drainTimeoutMs: deps.drainTimeoutMs });
    if (current) await deps.release(deploymentId, current);
    await report({
      endpoint: want.name,
      revisionId: want.job.revisionId,
      fromRevisionId: current?.revisionId ?? null,
      served: true,
    });
    return true;
  }

  /** Brings the endpoint's split to what is wanted: started, re-weighted, replaced or ended. */
  async function splitOne(deploymentId: string, want: WantedEndpoint, report: Report, signal: AbortSignal) {
    const key = `${deploymentId}/${want.name}`;
    const base = serving.get(deploymentId)?.get(want.name);
    const current = splits.get(deploymentId)?.get(want.name);
    const wanted = want.split ?? null;
    if (wanted === null || !base || base.revisionId !== want.job.revisionId) {
      if (wanted === null) failedSplits.delete(key);
      await stopSplit(deploymentId, want.name, deps.drainTimeoutMs);
      return;
    }
    const split = { endpoint: want.name, split: { weight: wanted.weight } };
    const label = endpointLabel(base.slug, want.name);
    const route = (app: App) => ({
      baseRevisionId: base.revisionId,
      revisionId: app.revisionId,
      targets: app.supervisor.webTargets,
      weight: wanted.weight,
    });
    if (current?.app.revisionId === wanted.job.revisionId) {
      if (current.weight === wanted.weight && current.baseRevisionId === base.revisionId) return;
      await edge.setSplit(label, route(current.app));
      Object.assign(current, { weight: wanted.weight, baseRevisionId: base.revisionId });
      await report({ ...split, revisionId: current.app.revisionId, fromRevisionId: null, served: true });
      return;
    }
    if (failedSplits.get(key) === wanted.job.revisionId) return;
    let next: App;
    try {
      next = await deps.track(deploymentId, wanted.job.revisionId, deps.start(wanted.job, want.name, signal));
    } catch (error) {
      if (signal.aborted) return;
      failedSplits.set(key, wanted.job.revisionId);
      const message = error instanceof Error ? error.message : String(error);
      logger.warn({ deploymentId, endpoint: want.name, err: error }, 'split revision start failed');
      await report({ ...split, revisionId: wanted.job.revisionId, served: false, message });
      return;
    }
    if (signal.aborted) return void (await deps.release(deploymentId, next));
    failedSplits.delete(key);
    let byName = splits.get(deploymentId);
    if (!byName) splits.set(deploymentId, (byName = new Map<string, ServedSplit<App>>()));
    byName.set(want.name, { app: next, weight: wanted.weight, baseRevisionId: base.revisionId });
    // Healthy before any request is sent there; a replaced second revision drains first.
    await edge.setSplit(label, route(next), { drainTimeoutMs: deps.drainTimeoutMs });
    if (current) await deps.release(deploymentId, current.app);
    await report({
      ...split,
      revisionId: next.revisionId,
      fromRevisionId: current?.app.revisionId ?? null,
      served: true,
    });
  }

  return {
    stopSplit,
    promoteSplit,
    splitOne,
    /** Forgets the failed starts of the deployment's endpoints but those named `keep` (all when none). */
    forgetFailures(deploymentId: string, keep: ReadonlySet<string> = new Set()): void {
      for (const key of [...failedSplits.keys()])
        if (key.startsWith(`${deploymentId}/`) && !keep.has(key.slice(deploymentId.length + 1)))
          failedSplits.delete(key);
    },
    /** Once the deployment's endpoints are stopped. */
    forget(deploymentId: string): void {
      splits.delete(deploymentId);
    },
    /** Each split's second revision served here. */
    all(): { deploymentId: string; name: string; app: App }[] {
      return [...splits].flatMap(([deploymentId, byName]) =>
        [...byName].map(([name, split]) => ({ deploymentId, name, app: split.app })),
      );
    },
  };
}
