/**
 * The control loop: whenever the desired state or the cluster changes, take a snapshot of both, let
 * `reconcile` decide, and carry the actions out. Passes never overlap; changes that come during a
 * pass make one more pass after it, and a pass runs every so often regardless, in case a change was
 * missed. Being level-triggered, a retry simply recomputes what is still to do.
 *
 * Back-off is per deployment (issue 25: a listener-wide one let one failing deployment hold up every
 * other, a healthy new deployment for 29 s): a deployment whose actions failed is left out of the
 * passes until its own back-off ends, while the others go on at once; a change of that deployment in
 * the desired state (a new revision, a patch, a delete) ends its back-off.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { ClusterCache } from './cluster-cache.ts';
import type { DesiredState } from './desired-state.ts';
import type { KubeClient } from './kube-client.ts';
import { keyOf, refOf } from './kube-objects.ts';
import type { BuildContext } from './manifest-builder.ts';
import { SPEC_HASH_ANNOTATION } from './manifest-names.ts';
import type { DeploymentCondition, ProtocolClient } from './protocol-client.ts';
import type { GatewaySupport } from './endpoint-manifests.ts';
import { endpointApplyKey } from './endpoint-plan.ts';
import { reconcile } from './reconcile.ts';
import { createPlanExecution } from './plan-execution.ts';
import { readResourceSpec } from './resource-spec.ts';
import { createBackoff, sleep, type Backoff, type BackoffOptions } from './retry-backoff.ts';

export interface ControllerOptions {
  readonly protocol: ProtocolClient;
  readonly kube: KubeClient;
  readonly cache: () => ClusterCache | null;
  readonly build: BuildContext;
  readonly namespaces: readonly string[];
  readonly logger: Logger;
  readonly backoff: BackoffOptions;
  /** A pass at least this often, even without a change. */
  readonly resyncMs: number;
  /** How long applies must keep finding their namespace missing before the revision fails. */
  readonly missingNamespaceConfirmMs: number;
  /** Where the cluster's Gateway API stands (endpoints' HTTPRoutes), once discovered. */
  readonly gateway?: () => GatewaySupport;
  /** Runs before each pass (the Gateway API looked at again when due). */
  readonly beforePass?: () => Promise<void>;
  /** An HTTPRoute apply was answered 404: the Gateway API's CRDs may be gone. */
  readonly routesGone?: () => void;
}

export interface Controller {
  setDesired(state: DesiredState): void;
  wake(): void;
  /** Problems of the last pass, for the heartbeat: null when everything went through. */
  problem(): string | null;
  /** How many deployments are in the desired state, and how many still roll out, for the heartbeat. */
  summary(): string;
  /**
   * The deployments whose DEPLOYED revision is not healthy, as of the last pass, and when that pass
   * looked at the cluster; null before the first pass (nothing is known yet, so nothing is said).
   */
  conditions(): { readonly observedAt: Date; readonly deployments: readonly DeploymentCondition[] } | null;
  stop(): Promise<void>;
}

/** A deployment whose actions failed, left out of the passes until `until`. */
interface HeldBack {
  readonly backoff: Backoff;
  /** The deployment's entry in the desired state when it failed: another entry ends the back-off. */
  readonly entry: string;
  until: number;
  problem: string;
}

/**
 * How long an apply is remembered while the list-watch does not show it: far longer than a watch takes
 * to deliver an event, short enough that an object someone else changed meanwhile is applied again.
 */
const APPLIED_MEMORY_MS = 30_000;

export function startController(options: ControllerOptions): Controller {
  const { protocol, kube, logger } = options;
  const stop = new AbortController();
  // What this process did and was told, which the next passes' plans depend on (plan-execution.ts).
  const { execute, reported, refused, missingSince, confirmed, applied, endpointReports } = createPlanExecution({
    protocol,
    kube,
    logger,
    signal: stop.signal,
    missingNamespaceConfirmMs: options.missingNamespaceConfirmMs,
    markDirty: () => {
      dirty = true;
    },
    ...(options.routesGone ? { routesGone: options.routesGone } : {}),
  });
  const lastSummary = new Map<string, string>();
  /** Deployment id to its back-off, while its last try failed. */
  const held = new Map<string, HeldBack>();
  /**
   * Deployment id to the `update_failed` condition of its serving revision last told: it is told until
   * the change that follows it has rolled out, not only started (issue 25: a rollout progressing again
   * cleared it, and the service told `deployment.update_rolled_out` too early).
   */
  const updateFailed = new Map<string, DeploymentCondition>();
  /** Deployment id to the ignored resource_spec fields last logged (the spec may change in place). */
  const ignoredLogged = new Map<string, string>();
  let desired: DesiredState | null = null;
  let dirty = true;
  let waiting: (() => void) | null = null;
  let lastProblem: string | null = null;
  /** Deployments whose revision is DEPLOYED at the service but no longer rolls out, for the heartbeat. */
  let notRollingOut: string[] = [];
  /** What plans say a user must know (an endpoint's split this cluster cannot serve), for the heartbeat. */
  let notices: string[] = [];
  let rollingOut = 0;
  let lastConditions: ReturnType<Controller['conditions']> = null;

  const wake = () => {
    dirty = true;
    waiting?.();
  };

  function logIgnoredFields(state: DesiredState) {
    for (const d of state.deployments) {
      const revision = d.revision;
      if (!revision) continue;
      const { ignored } = readResourceSpec(revision.resource_spec);
      const key = JSON.stringify(ignored);
      if (ignoredLogged.get(d.deployment_id) === key) continue;
      ignoredLogged.set(d.deployment_id, key);
      if (ignored.length > 0)
        logger.warn(
          { deployment_id: d.deployment_id, revision_id: revision.id, fields: ignored },
          'resource_spec fields a container deployment has no use for are ignored (see docs/listener.md)',
        );
    }
  }

  /** What was applied lately and is not in `objects` yet; forgets what the cluster shows, and old entries. */
  function appliedNotSeen(objects: ReturnType<ClusterCache['snapshot']>): Map<string, string> {
    const now = Date.now();
    const byKey = new Map(objects.map((o) => [keyOf(refOf(o)), o]));
    for (const [key, entry] of applied) {
      const seen = byKey.get(key)?.metadata.annotations?.[SPEC_HASH_ANNOTATION] === entry.hash;
      if (seen || now - entry.at > APPLIED_MEMORY_MS) applied.delete(key);
    }
    return new Map([...applied].map(([key, entry]) => [key, entry.hash]));
  }

  async function pass(): Promise<void> {
    const cache = options.cache();
    if (desired === null || cache === null) return;
    await options.beforePass?.();
    const objects = cache.snapshot();
    const plans = reconcile(
      desired,
      {
        objects,
        memory: { reported, refused, confirmed, applied: appliedNotSeen(objects), endpointReports },
        namespaces: cache.namespaces(),
      },
      {
        ...options.build,
        namespaces: options.namespaces,
        entropy: randomBytes(32).toString('hex'),
        now: Date.now(),
        ...(options.gateway ? { gateway: options.gateway() } : {}),
      },
    );
    const observedAt = new Date();
    const problems: string[] = [];
    const stuck: string[] = [];
    const conditions: DeploymentCondition[] = [];
    const told: string[] = [];
    let going = 0;
    for (const plan of plans) {
      const entry = desired.deployments.find((d) => d.deployment_id === plan.deploymentId);
      // Nothing is reported for a revision the service has as DEPLOYED (it would be ignored): an in-place
      // change of it (resource_spec, secret_references, custom_url) that fails is told here and in the
      // heartbeat, while the replicas of before keep serving.
      const deployedButFailing = plan.phase === 'failed' && entry?.revision?.status === 'DEPLOYED';
      if (deployedButFailing) stuck.push(`${entry.name}: ${plan.summary}`);
      told.push(...(plan.notices ?? []));
      const toldFailed = updateFailed.get(plan.deploymentId);
      if (plan.condition) {
        const condition: DeploymentCondition = {
          deployment_id: plan.deploymentId,
          revision_id: plan.condition.revisionId,
          condition: plan.condition.condition,
          reason: plan.condition.reason,
          message: plan.condition.message.slice(0, 4000),
          ...(plan.condition.change === undefined ? {} : { change: plan.condition.change }),
        };
        conditions.push(condition);
        if (condition.condition === 'update_failed') updateFailed.set(plan.deploymentId, condition);
      } else if (
        toldFailed !== undefined &&
        entry?.revision?.status === 'DEPLOYED' &&
        entry.revision.id === toldFailed.revision_id &&
        plan.phase !== 'deployed'
      ) {
        // The change after a failed one is on its way (applied, rolling out): not rolled out until it is.
        conditions.push(toldFailed);
      } else updateFailed.delete(plan.deploymentId);
      if (lastSummary.get(plan.deploymentId) !== plan.summary) {
        lastSummary.set(plan.deploymentId, plan.summary);
        if (deployedButFailing)
          logger.warn(
            { deployment_id: plan.deploymentId, revision_id: entry.revision?.id },
            `${plan.summary}; the revision stays DEPLOYED at the service and the replicas of before keep serving`,
          );
        else logger.info({ deployment_id: plan.deploymentId }, plan.summary);
      }
      if (plan.phase === 'rolling-out') going += 1;
      const entryKey = JSON.stringify(entry ?? null);
      const hold = held.get(plan.deploymentId);
      if (hold !== undefined && hold.entry === entryKey && Date.now() < hold.until) {
        problems.push(hold.problem);
        continue;
      }
      const problem = await execute(plan);
      if (stop.signal.aborted) return;
      if (problem === null) {
        held.delete(plan.deploymentId);
        continue;
      }
      problems.push(problem);
      // The same entry failing again waits longer; a changed one starts over from the first delay.
      const backoff = hold?.entry === entryKey ? hold.backoff : createBackoff(options.backoff);
      const delay = backoff.next();
      held.set(plan.deploymentId, { backoff, entry: entryKey, until: Date.now() + delay, problem });
      logger.warn(
        { deployment_id: plan.deploymentId, err: problem, retry_in_ms: delay },
        'an action failed; trying this deployment again after a back-off',
      );
    }
    rollingOut = going;
    notRollingOut = stuck;
    notices = told;
    lastConditions = { observedAt, deployments: conditions };
    for (const id of lastSummary.keys()) if (!plans.some((p) => p.deploymentId === id)) lastSummary.delete(id);
    for (const id of held.keys()) if (!plans.some((p) => p.deploymentId === id)) held.delete(id);
    for (const id of updateFailed.keys()) if (!plans.some((p) => p.deploymentId === id)) updateFailed.delete(id);
    lastProblem = problems.length > 0 ? problems.join('; ').slice(0, 2000) : null;
  }

  const loop = (async () => {
    /** Only for a pass that throws (a bug of the agent itself), which holds everything up. */
    const backoff = createBackoff(options.backoff);
    while (!stop.signal.aborted) {
      if (!dirty) {
        // Until something changes, the next resync, or the end of the first back-off of a deployment.
        const due = Math.min(...[...held.values()].map((h) => h.until)) - Date.now();
        await new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            stop.signal.removeEventListener('abort', done);
            waiting = null;
            resolve();
          };
          const timer = setTimeout(done, Math.max(0, Math.min(options.resyncMs, due)));
          waiting = done;
          stop.signal.addEventListener('abort', done);
        });
        if (stop.signal.aborted) break;
      }
      dirty = false;
      try {
        await pass();
        backoff.reset();
      } catch (error) {
        // A bug of the agent itself: log it and try again later rather than die with the pass.
        logger.error({ err: error }, 'reconcile pass failed');
        lastProblem = error instanceof Error ? error.message : String(error);
        await sleep(backoff.next(), stop.signal);
        dirty = true;
      }
    }
  })();

  return {
    setDesired(state) {
      desired = state;
      logIgnoredFields(state);
      // Forget what concerns revisions no longer in the desired state: the maps stay small.
      const current = new Set(
        state.deployments.flatMap((d) => [
          ...(d.revision ? [d.revision.id] : []),
          ...(d.endpoints ?? []).map((e) => endpointApplyKey(d.deployment_id, e.name, e.revision.id)),
        ]),
      );
      for (const id of reported.keys()) if (!current.has(id)) reported.delete(id);
      for (const id of refused.keys()) if (!current.has(id)) refused.delete(id);
      for (const id of missingSince.keys()) if (!current.has(id)) missingSince.delete(id);
      const endpointsNow = new Set(
        state.deployments.flatMap((d) =>
          (d.endpoints ?? []).map((e) => `${d.deployment_id}/${e.name}/${e.revision.id}/`),
        ),
      );
      for (const key of endpointReports)
        if (![...endpointsNow].some((prefix) => key.startsWith(prefix))) endpointReports.delete(key);
      const present = new Set(state.deployments.map((d) => d.deployment_id));
      for (const id of ignoredLogged.keys()) if (!present.has(id)) ignoredLogged.delete(id);
      const deleting = new Set(state.deployments.filter((d) => d.delete).map((d) => d.deployment_id));
      for (const id of confirmed) if (!deleting.has(id)) confirmed.delete(id);
      wake();
    },
    wake,
    problem: () => {
      const all = [
        ...notRollingOut.map((s) => `deployed revision not rolling out: ${s}`),
        ...notices,
        ...(lastProblem === null ? [] : [lastProblem]),
      ];
      return all.length > 0 ? all.join('; ').slice(0, 2000) : null;
    },
    conditions: () => lastConditions,
    summary: () =>
      desired === null
        ? 'waiting for the desired state'
        : `${desired.deployments.length} deployment(s), ${rollingOut} rolling out`,
    async stop() {
      stop.abort();
      await loop;
    },
  };
}
