/**
 * Traffic splits on endpoints (docs/app-urls.md, "Traffic split"): an endpoint serving revision A sends a
 * share of its clients to revision B. The one writer of a split: the API's set and remove, a move of the
 * endpoint (which ends it: promoted when it moves to B) and the automatic rollback
 * (src/service/split-rollback-monitor.ts) all change it here, each with an event saying who and why.
 */
import type { Kysely } from 'kysely';
import {
  rollbackSettings,
  splitWeightProblem,
  type RollbackInput,
  type RollbackVerdict,
} from '../domain/endpoint-splits.ts';
import { AppError, notFound } from '../errors.ts';
import type { Clock } from '../clock.ts';
import { clearSplit, getEndpoint, putSplit } from '../store/deployment-endpoints.ts';
import { lockDeployment, lockDeploymentById } from '../store/deployments.ts';
import { recordEvents } from '../store/events.ts';
import { getRevision } from '../store/revisions.ts';
import type { Database, Db, DeploymentEndpointRow, DeploymentRow } from '../store/schema.ts';
import type { EndpointActor } from './deployment-endpoints.ts';
import { checkEndpointQuota, type ResourcePolicy } from './resource-quotas.ts';

export interface SplitInput {
  revisionId: string;
  weight: number;
  rollback?: RollbackInput | null | undefined;
}

/** Why a split ends, for its event. */
export type SplitEnd =
  | { kind: 'removed'; actor: EndpointActor }
  | { kind: 'promoted' | 'moved'; actor: EndpointActor; toRevisionId: string }
  | { kind: 'rolled_back'; verdict: RollbackVerdict };

const by = (actor: EndpointActor) => ({ api_key_id: actor.keyId, name: actor.keyName });

/**
 * Ends the endpoint's split, if it has one, in the caller's transaction (the deployment row locked), with
 * its event: the one way a split ends.
 */
export async function endSplit(
  tx: Db,
  deployment: Pick<DeploymentRow, 'id' | 'workspace_id'>,
  row: DeploymentEndpointRow,
  end: SplitEnd,
): Promise<void> {
  if (row.split_revision_id === null) return;
  await clearSplit(tx, deployment.id, row.name);
  const common = { endpoint: row.name, revision_id: row.revision_id, split_revision_id: row.split_revision_id };
  const event =
    end.kind === 'rolled_back'
      ? {
          type: 'deployment.endpoint_split_rolled_back' as const,
          data: {
            ...common,
            weight: row.split_weight,
            reason: end.verdict.reason,
            message: end.verdict.message,
            base: end.verdict.base,
            split: end.verdict.split,
            by: { automatic_rollback: true },
          },
        }
      : {
          type: 'deployment.endpoint_split_ended' as const,
          data: {
            ...common,
            weight: row.split_weight,
            reason: end.kind,
            ...(end.kind === 'removed' ? {} : { to_revision_id: end.toRevisionId }),
            by: by(end.actor),
          },
        };
  await recordEvents(tx, [
    {
      workspaceId: deployment.workspace_id,
      subjectType: 'deployment',
      subjectId: deployment.id,
      deploymentId: deployment.id,
      ...event,
    },
  ]);
}

export interface SplitServiceDeps {
  db: Kysely<Database>;
  resources: ResourcePolicy | null;
  now?: Clock;
}

export function createSplitService({ db, resources, now = () => new Date() }: SplitServiceDeps) {
  async function lockedEndpoint(tx: Db, workspaceId: string, deploymentId: string, name: string) {
    const deployment = await lockDeployment(tx, workspaceId, deploymentId);
    if (!deployment || deployment.status === 'AWAITING_DELETE') throw notFound('Deployment', deploymentId);
    const row = await getEndpoint(tx, deploymentId, name);
    if (!row) throw new AppError('not_found', `Endpoint ${name} not found.`);
    return { deployment, row };
  }

  return {
    /** Sets or changes the endpoint's split; answers the endpoint as it is now. */
    async set(
      workspaceId: string,
      deploymentId: string,
      name: string,
      input: SplitInput,
      actor: EndpointActor,
    ): Promise<{ deployment: DeploymentRow; row: DeploymentEndpointRow }> {
      const weightProblem = splitWeightProblem(input.weight);
      if (weightProblem) throw new AppError('invalid_request', `${weightProblem}.`);
      const rollback = input.rollback ? rollbackSettings(input.rollback) : null;
      if (typeof rollback === 'string') throw new AppError('invalid_request', `${rollback}.`);
      return db.transaction().execute(async (tx) => {
        const { deployment, row } = await lockedEndpoint(tx, workspaceId, deploymentId, name);
        // Taken as asked and never done would be worse than refused (docs/listener.md, "Endpoints").
        if (rollback !== null && deployment.listener_id !== null)
          throw new AppError(
            'invalid_request',
            "rollback: a deployment on a listener has no automatic rollback (the service sees none of its cluster's requests); send rollback null and take the split back with DELETE",
          );
        const revision = await getRevision(tx, workspaceId, deploymentId, input.revisionId.toLowerCase());
        if (!revision)
          throw new AppError(
            'invalid_reference',
            `revision_id: Revision ID ${input.revisionId} not found in this deployment.`,
          );
        if (revision.status !== 'DEPLOYED')
          throw new AppError(
            'invalid_request',
            `revision_id: revision ${revision.id} is ${revision.status}; only a revision that built and deployed (DEPLOYED) can take part of an endpoint's traffic.`,
          );
        if (revision.id === row.revision_id)
          throw new AppError(
            'invalid_request',
            `revision_id: the endpoint serves revision ${revision.id} already; a split sends part of its traffic to another revision.`,
          );
        const sameRevision = row.split_revision_id === revision.id;
        // A new second revision runs a copy of the deployment's instances, which the quota counts (a
        // listener's cluster is not the workspace's quota, as for its endpoints).
        if (row.split_revision_id === null && resources && deployment.listener_id === null)
          await checkEndpointQuota(tx, resources, workspaceId, deployment.source_config.resource_spec ?? null);
        const before = row.split_revision_id === null ? null : row;
        const after = await putSplit(tx, deploymentId, name, {
          revisionId: revision.id,
          weight: input.weight,
          rollback,
          startedAt: sameRevision && row.split_started_at ? row.split_started_at : now(),
        });
        if (
          before?.split_revision_id === after.split_revision_id &&
          before.split_weight === after.split_weight &&
          JSON.stringify(before.split_rollback) === JSON.stringify(after.split_rollback)
        )
          return { deployment, row: after };
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'deployment',
            subjectId: deploymentId,
            deploymentId,
            type: before === null ? 'deployment.endpoint_split_set' : 'deployment.endpoint_split_changed',
            data: {
              endpoint: name,
              revision_id: row.revision_id,
              split_revision_id: revision.id,
              weight: input.weight,
              rollback,
              ...(before === null
                ? {}
                : { from_split_revision_id: before.split_revision_id, from_weight: before.split_weight }),
              by: by(actor),
            },
          },
        ]);
        return { deployment, row: after };
      });
    },

    /** Takes the split back: every client goes to the endpoint's revision again. */
    async remove(workspaceId: string, deploymentId: string, name: string, actor: EndpointActor): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const { deployment, row } = await lockedEndpoint(tx, workspaceId, deploymentId, name);
        if (row.split_revision_id === null) throw new AppError('not_found', `Endpoint ${name} has no traffic split.`);
        await endSplit(tx, deployment, row, { kind: 'removed', actor });
      });
    },

    /**
     * The automatic rollback's decision (src/service/split-rollback-monitor.ts): ends the split when it
     * is still the one that was judged (same second revision, started at the same time). False when it
     * changed meanwhile and nothing was done.
     */
    async rollBack(
      deploymentId: string,
      name: string,
      judged: { splitRevisionId: string; startedAt: Date },
      verdict: RollbackVerdict,
    ): Promise<boolean> {
      return db.transaction().execute(async (tx) => {
        const deployment = await lockDeploymentById(tx, deploymentId);
        if (!deployment) return false;
        const row = await getEndpoint(tx, deploymentId, name);
        if (
          !row ||
          row.split_revision_id !== judged.splitRevisionId ||
          row.split_started_at?.getTime() !== judged.startedAt.getTime()
        )
          return false;
        await endSplit(tx, deployment, row, { kind: 'rolled_back', verdict });
        return true;
      });
    },
  };
}

export type SplitService = ReturnType<typeof createSplitService>;
