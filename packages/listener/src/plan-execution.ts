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

export function createPlanExecution(deps: PlanExecutionDeps) {
  const { protocol, kube, logger, signal } = deps;
  /** Revision id to the highest status reported for it. */
  const reported = new Map<string, ReportedStatus>();
  /** Revision id to the apply the API server (or a missing namespace) refused. */
  const refused = new Map<string, RefusedApply>();
  /**
   * Revision id to when an apply of it first found its namespace missing (404): retried while an
   * operator may be creating it, then failed with the API server's words (before, it stayed QUEUED
   * until the service's 24-hour deadline).
   */
  const missingSince = new Map<string, number>();
  /** Deployments whose deletion the service has confirmed. */
  const confirmed = new Set<string>();
  /** Object key to what this process applied and when, until the list-watch shows it (`Memory.applied`). */
  const applied = new Map<string, { hash: string; at: number }>();
  /** The endpoint reports made (`Memory.endpointReports`). */
  const endpointReports = new Set<string>();

  /** The reports, applies and deletes of one deployment, in order; stops at the first failure. */
  async function execute(plan: Plan): Promise<string | null> {
    for (const action of plan.actions) {
      try {
        await perform(plan.deploymentId, action);
      } catch (error) {
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
            { deployment_id: plan.deploymentId, err: error.message },
            'the cluster no longer serves HTTPRoute; looking for the Gateway API again',
          );
          deps.routesGone?.();
          // Tried again after the deployment's back-off, as any failure: never a loop of 404s.
          return `${plan.deploymentId}: ${error.message}`;
        }
        if (error instanceof NamespaceMissingError && action.type === 'apply') {
          const since = missingSince.get(action.revisionId) ?? Date.now();
          missingSince.set(action.revisionId, since);
          if (Date.now() - since >= deps.missingNamespaceConfirmMs) {
            missingSince.delete(action.revisionId);
            refused.set(action.revisionId, {
              message: error.message,
              inputs: action.inputs,
              reason: 'namespace_not_found',
            });
            logger.warn(
              { deployment_id: plan.deploymentId, revision_id: action.revisionId, err: error.message },
              'the namespace of a revision does not exist; the revision fails',
            );
            deps.markDirty();
            return null;
          }
        }
        if (error instanceof ApplyRefusedError && action.type === 'apply') {
          // Nothing to retry: the next pass reports the revision failed with the API server's words.
          refused.set(action.revisionId, { message: error.message, inputs: action.inputs });
          logger.warn(
            { deployment_id: plan.deploymentId, revision_id: action.revisionId, err: error.message },
            'the API server refused a manifest',
          );
          deps.markDirty();
          return null;
        }
        if (
          permanentRefusal(error) &&
          (action.type === 'report' || action.type === 'confirm-deletion' || action.type === 'report-endpoint')
        ) {
          // The service will say no again (an unknown revision, a deployment no longer being deleted):
          // take it as done so that it is not asked again, and say so.
          logger.error(
            { deployment_id: plan.deploymentId, action: action.type, err: error.message },
            'the service refused the request; not repeating it',
          );
          if (action.type === 'report') remember(action.revisionId, action.status);
          else if (action.type === 'report-endpoint') rememberEndpointReport(action);
          else confirmed.add(plan.deploymentId);
          continue;
        }
        return `${plan.deploymentId}: ${error instanceof Error ? error.message : String(error)}`;
      }
    }
    return null;
  }

  /** A report made: what it replaces is forgotten (a split served, refused, then served again is said each time). */
  function rememberEndpointReport(action: { key: string; replaces?: string }) {
    if (action.replaces !== undefined)
      for (const key of endpointReports) if (key.startsWith(action.replaces)) endpointReports.delete(key);
    endpointReports.add(action.key);
  }

  function remember(revisionId: string, status: ReportedStatus) {
    const before = reported.get(revisionId);
    if (before === undefined || REPORTED_RANK[status] > REPORTED_RANK[before]) reported.set(revisionId, status);
  }

  async function perform(deploymentId: string, action: Action): Promise<void> {
    switch (action.type) {
      case 'report': {
        const answer = await protocol.report(
          {
            revision_id: action.revisionId,
            status: action.status,
            ...(action.failureReason ? { failure_reason: action.failureReason } : {}),
            ...(action.message ? { message: action.message.slice(0, 4000) } : {}),
          },
          signal,
        );
        remember(action.revisionId, action.status);
        logger.info(
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
        return;
      }
      case 'report-endpoint': {
        const answer = await protocol.reportEndpoint(
          {
            deployment_id: deploymentId,
            endpoint: action.endpoint,
            revision_id: action.revisionId,
            status: action.status,
            ...(action.message === undefined ? {} : { message: action.message }),
            ...(action.split === undefined ? {} : { split: { weight: action.split.weight } }),
          },
          signal,
        );
        rememberEndpointReport(action);
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
        return;
      }
      case 'apply': {
        await kube.apply(action.manifest);
        missingSince.delete(action.revisionId);
        const hash = action.manifest.metadata.annotations?.[SPEC_HASH_ANNOTATION];
        if (hash !== undefined) applied.set(keyOf(refOf(action.manifest)), { hash, at: Date.now() });
        logger.debug({ deployment_id: deploymentId, object: keyOf(refOf(action.manifest)) }, 'applied');
        return;
      }
      case 'hand-over-replicas': {
        const { target, replicas } = action;
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
        return;
      }
      case 'delete':
        await kube.remove(action.target);
        logger.info({ deployment_id: deploymentId, object: keyOf(action.target) }, 'deleted');
        return;
      case 'confirm-deletion':
        await protocol.confirmDeletion(deploymentId, signal);
        confirmed.add(deploymentId);
        logger.info(
          { deployment_id: deploymentId },
          'deletion confirmed: nothing of the deployment is left in the cluster',
        );
        return;
    }
  }

  return { execute, reported, refused, missingSince, confirmed, applied, endpointReports };
}
