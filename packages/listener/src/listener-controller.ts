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
import type { DesiredDeployment, DesiredState } from './desired-state.ts';
import type { KubeClient } from './kube-client.ts';
import { keyOf, refOf } from './kube-objects.ts';
import type { BuildContext } from './manifest-builder.ts';
import { SPEC_HASH_ANNOTATION } from './manifest-names.ts';
import type { DeploymentCondition, ProtocolClient } from './protocol-client.ts';
import type { GatewaySupport } from './endpoint-manifests.ts';
import { endpointApplyKey } from './endpoint-plan.ts';
import { reconcile } from './reconcile.ts';
import type { Plan } from './reconcile-plan.ts';
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

/** What the controller keeps between passes, shared by its loop, its passes and the calls of its owner. */
interface ControllerState {
  readonly options: ControllerOptions;
  readonly signal: AbortSignal;
  /** What this process did and was told, which the next passes' plans depend on (plan-execution.ts). */
  readonly execution: ReturnType<typeof createPlanExecution>;
  /** Deployment id to the summary of its plan last logged. */
  readonly lastSummary: Map<string, string>;
  /** Deployment id to its back-off, while its last try failed. */
  readonly held: Map<string, HeldBack>;
  /**
   * Deployment id to the `update_failed` condition of its serving revision last told: it is told until
   * the change that follows it has rolled out, not only started (issue 25: a rollout progressing again
   * cleared it, and the service told `deployment.update_rolled_out` too early).
   */
  readonly updateFailed: Map<string, DeploymentCondition>;
  /** Deployment id to the ignored resource_spec fields last logged (the spec may change in place). */
  readonly ignoredLogged: Map<string, string>;
  desired: DesiredState | null;
  /** Something changed since the last pass began: another pass is due. */
  dirty: boolean;
  /** Ends the loop's wait for a change, while it waits. */
  waiting: (() => void) | null;
  lastProblem: string | null;
  /** Deployments whose revision is DEPLOYED at the service but no longer rolls out, for the heartbeat. */
  notRollingOut: string[];
  /** What plans say a user must know (an endpoint's split this cluster cannot serve), for the heartbeat. */
  notices: string[];
  rollingOut: number;
  lastConditions: ReturnType<Controller['conditions']>;
}

/** What one pass finds, for the heartbeat once the pass is over. */
interface PassFindings {
  readonly problems: string[];
  /** Deployed revisions whose in-place change failed (`deployedButFailing`). */
  readonly stuck: string[];
  readonly conditions: DeploymentCondition[];
  readonly notices: string[];
  rollingOut: number;
}

export function startController(options: ControllerOptions): Controller {
  const stop = new AbortController();
  const state: ControllerState = {
    options,
    signal: stop.signal,
    execution: createPlanExecution({
      protocol: options.protocol,
      kube: options.kube,
      logger: options.logger,
      signal: stop.signal,
      missingNamespaceConfirmMs: options.missingNamespaceConfirmMs,
      markDirty: () => {
        state.dirty = true;
      },
      ...(options.routesGone ? { routesGone: options.routesGone } : {}),
    }),
    lastSummary: new Map(),
    held: new Map(),
    updateFailed: new Map(),
    ignoredLogged: new Map(),
    desired: null,
    dirty: true,
    waiting: null,
    lastProblem: null,
    notRollingOut: [],
    notices: [],
    rollingOut: 0,
    lastConditions: null,
  };
  const loop = runLoop(state);

  return {
    setDesired(desired) {
      state.desired = desired;
      logIgnoredFields(state, desired);
      forgetGone(state, desired);
      wake(state);
    },
    wake: () => wake(state),
    problem: () => {
      const all = [
        ...state.notRollingOut.map((s) => `deployed revision not rolling out: ${s}`),
        ...state.notices,
        ...(state.lastProblem === null ? [] : [state.lastProblem]),
      ];
      return all.length > 0 ? all.join('; ').slice(0, 2000) : null;
    },
    conditions: () => state.lastConditions,
    summary: () =>
      state.desired === null
        ? 'waiting for the desired state'
        : `${state.desired.deployments.length} deployment(s), ${state.rollingOut} rolling out`,
    async stop() {
      stop.abort();
      await loop;
    },
  };
}

function wake(state: ControllerState): void {
  state.dirty = true;
  state.waiting?.();
}

function logIgnoredFields(state: ControllerState, desired: DesiredState): void {
  for (const d of desired.deployments) {
    const revision = d.revision;
    if (!revision) continue;
    const { ignored } = readResourceSpec(revision.resource_spec);
    const key = JSON.stringify(ignored);
    if (state.ignoredLogged.get(d.deployment_id) === key) continue;
    state.ignoredLogged.set(d.deployment_id, key);
    if (ignored.length > 0)
      state.options.logger.warn(
        { deployment_id: d.deployment_id, revision_id: revision.id, fields: ignored },
        'resource_spec fields a container deployment has no use for are ignored (see docs/listener.md)',
      );
  }
}

/** Forgets what concerns revisions, endpoints and deployments no longer in the desired state: the maps stay small. */
function forgetGone(state: ControllerState, desired: DesiredState): void {
  const { reported, refused, missingSince, endpointReports, confirmed } = state.execution;
  const current = new Set(
    desired.deployments.flatMap((d) => [
      ...(d.revision ? [d.revision.id] : []),
      ...(d.endpoints ?? []).map((e) => endpointApplyKey(d.deployment_id, e.name, e.revision.id)),
    ]),
  );
  for (const id of reported.keys()) if (!current.has(id)) reported.delete(id);
  for (const id of refused.keys()) if (!current.has(id)) refused.delete(id);
  for (const id of missingSince.keys()) if (!current.has(id)) missingSince.delete(id);
  const endpointsNow = new Set(
    desired.deployments.flatMap((d) =>
      (d.endpoints ?? []).map((e) => `${d.deployment_id}/${e.name}/${e.revision.id}/`),
    ),
  );
  for (const key of endpointReports)
    if (![...endpointsNow].some((prefix) => key.startsWith(prefix))) endpointReports.delete(key);
  const present = new Set(desired.deployments.map((d) => d.deployment_id));
  for (const id of state.ignoredLogged.keys()) if (!present.has(id)) state.ignoredLogged.delete(id);
  const deleting = new Set(desired.deployments.filter((d) => d.delete).map((d) => d.deployment_id));
  for (const id of confirmed) if (!deleting.has(id)) confirmed.delete(id);
}

/** What was applied lately and is not in `objects` yet; forgets what the cluster shows, and old entries. */
function appliedNotSeen(
  applied: ControllerState['execution']['applied'],
  objects: ReturnType<ClusterCache['snapshot']>,
): Map<string, string> {
  const now = Date.now();
  const byKey = new Map(objects.map((o) => [keyOf(refOf(o)), o]));
  for (const [key, entry] of applied) {
    const seen = byKey.get(key)?.metadata.annotations?.[SPEC_HASH_ANNOTATION] === entry.hash;
    if (seen || now - entry.at > APPLIED_MEMORY_MS) applied.delete(key);
  }
  return new Map([...applied].map(([key, entry]) => [key, entry.hash]));
}

/** Passes, one after another, whenever something changed, a resync is due or a back-off ends. */
async function runLoop(state: ControllerState): Promise<void> {
  const { options, signal } = state;
  /** Only for a pass that throws (a bug of the agent itself), which holds everything up. */
  const backoff = createBackoff(options.backoff);
  while (!signal.aborted) {
    if (!state.dirty) {
      await waitForWork(state);
      if (signal.aborted) break;
    }
    state.dirty = false;
    try {
      await runPass(state);
      backoff.reset();
    } catch (error) {
      // A bug of the agent itself: log it and try again later rather than die with the pass.
      options.logger.error({ err: error }, 'reconcile pass failed');
      state.lastProblem = error instanceof Error ? error.message : String(error);
      await sleep(backoff.next(), signal);
      state.dirty = true;
    }
  }
}

/** Until something changes, the next resync, or the end of the first back-off of a deployment. */
function waitForWork(state: ControllerState): Promise<void> {
  const { signal } = state;
  const due = Math.min(...[...state.held.values()].map((h) => h.until)) - Date.now();
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      state.waiting = null;
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, Math.min(state.options.resyncMs, due)));
    state.waiting = done;
    signal.addEventListener('abort', done);
  });
}

/** One pass: a snapshot of both sides, the plans `reconcile` makes of them, and their actions carried out. */
async function runPass(state: ControllerState): Promise<void> {
  const { options, execution, held } = state;
  const cache = options.cache();
  const desired = state.desired;
  if (desired === null || cache === null) return;
  await options.beforePass?.();
  const objects = cache.snapshot();
  const { reported, refused, confirmed, endpointReports } = execution;
  const plans = reconcile(
    desired,
    {
      objects,
      memory: { reported, refused, confirmed, applied: appliedNotSeen(execution.applied, objects), endpointReports },
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
  const findings: PassFindings = { problems: [], stuck: [], conditions: [], notices: [], rollingOut: 0 };
  for (const plan of plans) {
    // The desired state as it is now: a newer one may have come while the plans before were carried out.
    const entry = state.desired?.deployments.find((d) => d.deployment_id === plan.deploymentId);
    notePlan(state, plan, entry, findings);
    const entryKey = JSON.stringify(entry ?? null);
    const hold = held.get(plan.deploymentId);
    if (hold !== undefined && hold.entry === entryKey && Date.now() < hold.until) {
      findings.problems.push(hold.problem);
      continue;
    }
    const problem = await execution.execute(plan);
    if (state.signal.aborted) return;
    if (problem === null) {
      held.delete(plan.deploymentId);
      continue;
    }
    findings.problems.push(problem);
    holdBack(state, plan.deploymentId, entryKey, hold, problem);
  }
  state.rollingOut = findings.rollingOut;
  state.notRollingOut = findings.stuck;
  state.notices = findings.notices;
  state.lastConditions = { observedAt, deployments: findings.conditions };
  for (const map of [state.lastSummary, held, state.updateFailed])
    for (const id of map.keys()) if (!plans.some((p) => p.deploymentId === id)) map.delete(id);
  state.lastProblem = findings.problems.length > 0 ? findings.problems.join('; ').slice(0, 2000) : null;
}

/** What a deployment's plan tells the heartbeat (its condition, a stuck in-place change, notices) and the log. */
function notePlan(
  state: ControllerState,
  plan: Plan,
  entry: DesiredDeployment | undefined,
  findings: PassFindings,
): void {
  const { logger } = state.options;
  // Nothing is reported for a revision the service has as DEPLOYED (it would be ignored): an in-place
  // change of it (resource_spec, secret_references, custom_url) that fails is told here and in the
  // heartbeat, while the replicas of before keep serving.
  const deployedButFailing = plan.phase === 'failed' && entry?.revision?.status === 'DEPLOYED';
  if (deployedButFailing) findings.stuck.push(`${entry.name}: ${plan.summary}`);
  findings.notices.push(...(plan.notices ?? []));
  const toldFailed = state.updateFailed.get(plan.deploymentId);
  if (plan.condition) {
    const condition: DeploymentCondition = {
      deployment_id: plan.deploymentId,
      revision_id: plan.condition.revisionId,
      condition: plan.condition.condition,
      reason: plan.condition.reason,
      message: plan.condition.message.slice(0, 4000),
      ...(plan.condition.change === undefined ? {} : { change: plan.condition.change }),
    };
    findings.conditions.push(condition);
    if (condition.condition === 'update_failed') state.updateFailed.set(plan.deploymentId, condition);
  } else if (
    toldFailed !== undefined &&
    entry?.revision?.status === 'DEPLOYED' &&
    entry.revision.id === toldFailed.revision_id &&
    plan.phase !== 'deployed'
  ) {
    // The change after a failed one is on its way (applied, rolling out): not rolled out until it is.
    findings.conditions.push(toldFailed);
  } else state.updateFailed.delete(plan.deploymentId);
  if (state.lastSummary.get(plan.deploymentId) !== plan.summary) {
    state.lastSummary.set(plan.deploymentId, plan.summary);
    if (deployedButFailing)
      logger.warn(
        { deployment_id: plan.deploymentId, revision_id: entry.revision?.id },
        `${plan.summary}; the revision stays DEPLOYED at the service and the replicas of before keep serving`,
      );
    else logger.info({ deployment_id: plan.deploymentId }, plan.summary);
  }
  if (plan.phase === 'rolling-out') findings.rollingOut += 1;
}

/** A deployment whose actions failed sits out the passes until its back-off ends. */
function holdBack(
  state: ControllerState,
  deploymentId: string,
  entryKey: string,
  hold: HeldBack | undefined,
  problem: string,
): void {
  // The same entry failing again waits longer; a changed one starts over from the first delay.
  const backoff = hold?.entry === entryKey ? hold.backoff : createBackoff(state.options.backoff);
  const delay = backoff.next();
  state.held.set(deploymentId, { backoff, entry: entryKey, until: Date.now() + delay, problem });
  state.options.logger.warn(
    { deployment_id: deploymentId, err: problem, retry_in_ms: delay },
    'an action failed; trying this deployment again after a back-off',
  );
}
