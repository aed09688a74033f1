/**
 * Carrying out one deployment's plan (reconcile.ts decides it): its reports to the service, applies,
 * hand-overs of replicas to an autoscaler, deletes and the confirmation of a deletion, in order, and
 * what a failure means: a namespace missing for long enough fails the revision, a manifest the API
 * server refuses is reported failed with its words, a request the service refuses for good is taken as
 * done. What it did is remembered here for the next passes' plans (`Memory` of reconcile.ts).
 */
import type { Logger } from 'pino';
import type { ReportedStatus } from './desired-state.ts';
import { ApplyRefusedError, KubeError, NamespaceMissingError, type KubeClient } from './kube-client.ts';
import { keyOf, refOf } from './kube-objects.ts';
import { HANDOVER_FIELD_MANAGER, SPEC_HASH_ANNOTATION } from './manifest-names.ts';
import { permanentRefusal, type ProtocolClient } from './protocol-client.ts';
import { REPORTED_RANK, type Action, type Plan, type RefusedApply } from './reconcile-plan.ts';

export interface PlanExecutionDeps {
  readonly protocol: ProtocolClient;
  readonly kube: KubeClient;
  readonly logger: Logger;
  /** Ends the requests to the service when the controller stops. */
  readonly signal: AbortSignal;
  /** How long applies must keep finding their namespace missing before the revision fails. */
  readonly missingNamespaceConfirmMs: number;
  /** Asks for another pass: what was learnt changes the plan. */
  readonly markDirty: () => void;
  /** An HTTPRoute apply was answered 404 (not for its namespace): the Gateway API's CRDs may be gone. */
  readonly routesGone?: () => void;
}

/** What this process did and was told, which the next passes' plans depend on (`Memory` of reconcile.ts). */
export interface ExecutionMemory {
  /** Revision id to the highest status reported for it. */
  readonly reported: Map<string, ReportedStatus>;
  /** Revision id to the apply the API server (or a missing namespace) refused. */
  readonly refused: Map<string, RefusedApply>;
  /**
   * Revision id to when an apply of it first found its namespace missing (404): retried while an
   * operator may be creating it, then failed with the API server's words (before, it stayed QUEUED
   * until the service's 24-hour deadline).
   */
  readonly missingSince: Map<string, number>;
  /** Deployments whose deletion the service has confirmed. */
  readonly confirmed: Set<string>;
  /** Object key to what this process applied and when, until the list-watch shows it (`Memory.applied`). */
  readonly applied: Map<string, { hash: string; at: number }>;
  /** The endpoint reports made (`Memory.endpointReports`). */
  readonly endpointReports: Set<string>;
}

/** An execution's dependencies and its memory, which the functions below share. */
interface Execution {
  readonly deps: PlanExecutionDeps;
  readonly memory: ExecutionMemory;
}

export function createPlanExecution(deps: PlanExecutionDeps): ExecutionMemory & {
  /** The reports, applies and deletes of one deployment, in order; stops at the first failure. */
  execute(plan: Plan): Promise<string | null>;
} {
  const memory: ExecutionMemory = {
    reported: new Map(),
    refused: new Map(),
    missingSince: new Map(),
    confirmed: new Set(),
    applied: new Map(),
    endpointReports: new Set(),
  };
  return { ...memory, execute: (plan) => execute({ deps, memory }, plan) };
}

async function execute(execution: Execution, plan: Plan): Promise<string | null> {
  for (const action of plan.actions) {
    try {
      await perform(execution, plan.deploymentId, action);
    } catch (error) {
      const outcome = afterFailure(execution, plan.deploymentId, action, error);
      if (!outcome.goOn) return outcome.problem;
    }
  }
  return null;
}

/** What a failed action means for the rest of its plan. */
type FailureOutcome =
  /** The service refused the request for good: it is taken as done, and the plan goes on. */
  | { readonly goOn: true }
  /**
   * The plan stops here: with the deployment's problem (tried again after its back-off), or null when what
   * was learnt ends this pass's work on it (the next pass plans with it).
   */
  | { readonly goOn: false; readonly problem: string | null };

/** What an action's failure means, remembered where the next passes' plans depend on it. */
function afterFailure(
  { deps, memory }: Execution,
  deploymentId: string,
  action: Action,
  error: unknown,
): FailureOutcome {
  const { logger } = deps;
  if (
    action.type === 'apply' &&
    action.manifest.kind === 'HTTPRoute' &&
    error instanceof KubeError &&
    error.status === 404 &&
    !(error instanceof NamespaceMissingError)
  ) {
    // The Gateway API's CRDs are gone, not the route refused: the next pass looks at the API's
    // discovery again, and the endpoint's split is then reported not served, with why. Not a
    // refusal (an ApplyRefusedError below would fail the endpoint for good).
    logger.warn(
      { deployment_id: deploymentId, err: error.message },
      'the cluster no longer serves HTTPRoute; looking for the Gateway API again',
    );
    deps.routesGone?.();
    // Tried again after the deployment's back-off, as any failure: never a loop of 404s.
    return { goOn: false, problem: `${deploymentId}: ${error.message}` };
  }
  if (error instanceof NamespaceMissingError && action.type === 'apply') {
    const since = memory.missingSince.get(action.revisionId) ?? Date.now();
    memory.missingSince.set(action.revisionId, since);
    if (Date.now() - since >= deps.missingNamespaceConfirmMs) {
      memory.missingSince.delete(action.revisionId);
      memory.refused.set(action.revisionId, {
        message: error.message,
        inputs: action.inputs,
        reason: 'namespace_not_found',
      });
      logger.warn(
        { deployment_id: deploymentId, revision_id: action.revisionId, err: error.message },
        'the namespace of a revision does not exist; the revision fails',
      );
      deps.markDirty();
      return { goOn: false, problem: null };
    }
  }
  if (error instanceof ApplyRefusedError && action.type === 'apply') {
    // Nothing to retry: the next pass reports the revision failed with the API server's words.
    memory.refused.set(action.revisionId, { message: error.message, inputs: action.inputs });
    logger.warn(
      { deployment_id: deploymentId, revision_id: action.revisionId, err: error.message },
      'the API server refused a manifest',
    );
    deps.markDirty();
    return { goOn: false, problem: null };
  }
  if (
    permanentRefusal(error) &&
    (action.type === 'report' || action.type === 'confirm-deletion' || action.type === 'report-endpoint')
  ) {
    // The service will say no again (an unknown revision, a deployment no longer being deleted):
    // take it as done so that it is not asked again, and say so.
    logger.error(
      { deployment_id: deploymentId, action: action.type, err: error.message },
      'the service refused the request; not repeating it',
    );
    if (action.type === 'report') remember(memory, action.revisionId, action.status);
    else if (action.type === 'report-endpoint') rememberEndpointReport(memory, action);
    else memory.confirmed.add(deploymentId);
    return { goOn: true };
  }
  return { goOn: false, problem: `${deploymentId}: ${error instanceof Error ? error.message : String(error)}` };
}

/** A report made: what it replaces is forgotten (a split served, refused, then served again is said each time). */
function rememberEndpointReport(memory: ExecutionMemory, action: { key: string; replaces?: string }) {
  if (action.replaces !== undefined)
    for (const key of memory.endpointReports) if (key.startsWith(action.replaces)) memory.endpointReports.delete(key);
  memory.endpointReports.add(action.key);
}

function remember(memory: ExecutionMemory, revisionId: string, status: ReportedStatus) {
  const before = memory.reported.get(revisionId);
  if (before === undefined || REPORTED_RANK[status] > REPORTED_RANK[before]) memory.reported.set(revisionId, status);
}

async function perform(execution: Execution, deploymentId: string, action: Action): Promise<void> {
  const { deps, memory } = execution;
  const { kube, logger } = deps;
  switch (action.type) {
    case 'report':
      return report(execution, deploymentId, action);
    case 'report-endpoint':
      return reportEndpoint(execution, deploymentId, action);
    case 'apply': {
      await kube.apply(action.manifest);
      memory.missingSince.delete(action.revisionId);
      const hash = action.manifest.metadata.annotations?.[SPEC_HASH_ANNOTATION];
      if (hash !== undefined) memory.applied.set(keyOf(refOf(action.manifest)), { hash, at: Date.now() });
      logger.debug({ deployment_id: deploymentId, object: keyOf(refOf(action.manifest)) }, 'applied');
      return;
    }
    case 'hand-over-replicas':
      return handOverReplicas(deps, deploymentId, action);
    case 'delete':
      await kube.remove(action.target);
      logger.info({ deployment_id: deploymentId, object: keyOf(action.target) }, 'deleted');
      return;
    case 'confirm-deletion':
      await deps.protocol.confirmDeletion(deploymentId, deps.signal);
      memory.confirmed.add(deploymentId);
      logger.info(
        { deployment_id: deploymentId },
        'deletion confirmed: nothing of the deployment is left in the cluster',
      );
      return;
  }
}

async function report(
  { deps, memory }: Execution,
  deploymentId: string,
  action: Extract<Action, { type: 'report' }>,
): Promise<void> {
  const answer = await deps.protocol.report(
    {
      revision_id: action.revisionId,
      status: action.status,
      ...(action.failureReason ? { failure_reason: action.failureReason } : {}),
      ...(action.message ? { message: action.message.slice(0, 4000) } : {}),
    },
    deps.signal,
  );
  remember(memory, action.revisionId, action.status);
  deps.logger.info(
    {
      deployment_id: deploymentId,
      revision_id: action.revisionId,
      status: action.status,
      failure_reason: action.failureReason,
      applied: answer.applied,
      now: answer.status,
    },
    'reported',
  );
}

async function reportEndpoint(
  { deps, memory }: Execution,
  deploymentId: string,
  action: Extract<Action, { type: 'report-endpoint' }>,
): Promise<void> {
  const { logger } = deps;
  const answer = await deps.protocol.reportEndpoint(
    {
      deployment_id: deploymentId,
      endpoint: action.endpoint,
      revision_id: action.revisionId,
      status: action.status,
      ...(action.message === undefined ? {} : { message: action.message }),
      ...(action.split === undefined ? {} : { split: { weight: action.split.weight } }),
    },
    deps.signal,
  );
  rememberEndpointReport(memory, action);
  const log = action.status === 'FAILED' ? logger.warn.bind(logger) : logger.info.bind(logger);
  log(
    {
      deployment_id: deploymentId,
      endpoint: action.endpoint,
      revision_id: action.revisionId,
      status: action.status,
      applied: answer.applied,
      message: action.message,
    },
    'endpoint reported',
  );
}

async function handOverReplicas(
  { kube, logger }: PlanExecutionDeps,
  deploymentId: string,
  { target, replicas }: Extract<Action, { type: 'hand-over-replicas' }>,
): Promise<void> {
  try {
    await kube.apply(
      {
        apiVersion: target.apiVersion,
        kind: target.kind,
        metadata: { name: target.name, namespace: target.namespace },
        spec: { replicas },
      },
      { fieldManager: HANDOVER_FIELD_MANAGER, force: false },
    );
    logger.info(
      { deployment_id: deploymentId, object: keyOf(target), replicas },
      'replicas handed over to the autoscaler',
    );
  } catch (error) {
    // A conflict: the autoscaler holds the field already, nothing to hand over.
    if (!(error instanceof KubeError && error.status === 409)) throw error;
    logger.debug({ deployment_id: deploymentId, object: keyOf(target) }, 'the autoscaler holds replicas already');
  }
}
