/**
 * The listener protocol, version 1 (docs/listener-protocol.md): what a listener agent in a user's
 * cluster reads (its desired state) and writes (status reports, deletion confirmations, heartbeats).
 * Every status change, the active revision and the end of a deletion go through
 * src/pipeline/transitions.ts with their events, in one transaction per request, locking the
 * deployment before its revisions (the order every writer uses).
 */
import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { SecretReference } from '../domain/deployment-plan.ts';
import { REVISION_STATES, isFinalRevisionStatus, type RevisionStatus } from '../domain/states.ts';
import { AppError, notFound } from '../errors.ts';
import { activateRevision, finishDeletion, transitionRevision, type Failure } from '../pipeline/transitions.ts';
import {
  applyConditions,
  conditionChanges,
  lockForConditions,
  type DeploymentConditionInput,
} from './listener-conditions.ts';
import { lockDeployment } from '../store/deployments.ts';
import { recordEvents } from '../store/events.ts';
import { isListenerCredentialActive } from '../store/listener-credentials.ts';
import {
  findListenerRevision,
  listenerDeploymentsWithRevisions,
  lockListener,
  markListenerSeen,
  recordListenerHeartbeat,
  type ListenerRevisionRow,
  type ListenerView,
} from '../store/listeners.ts';
import { lockRevision, lockRevisionsInStatus } from '../store/revisions.ts';
import type { Database } from '../store/schema.ts';

export const PROTOCOL_VERSION = 1;

// ----- desired state -----------------------------------------------------------------------------

export interface DesiredRevision {
  id: string;
  number: number;
  status: RevisionStatus;
  image_uri: string | null;
  /** Decrypted: the listener puts them into a Kubernetes Secret. */
  secrets: { name: string; value: string }[];
  /** The deployment's current value, as on the deployment: kept here for agents that read it here. */
  secret_references: SecretReference[] | null;
  /** The deployment's current value, as on the deployment: kept here for agents that read it here. */
  resource_spec: Record<string, unknown> | null;
}

export interface DesiredDeployment {
  deployment_id: string;
  name: string;
  namespace: string | null;
  delete: boolean;
  custom_url: string | null;
  /**
   * The deployment's current values, not the target revision's snapshot: a `source_config` or
   * `secret_references` patch makes no revision and applies to what runs in place.
   */
  resource_spec: Record<string, unknown> | null;
  secret_references: SecretReference[] | null;
  revision: DesiredRevision | null;
}

export interface DesiredState {
  protocol: typeof PROTOCOL_VERSION;
  listener_id: string;
  deployments: DesiredDeployment[];
}

/**
 * Final states in which a revision must not run: the listener keeps (or goes back to) the active
 * revision instead. DEPLOYED is final too, but it is what runs.
 */
const NOT_TO_RUN: ReadonlySet<RevisionStatus> = new Set(
  (Object.keys(REVISION_STATES) as RevisionStatus[]).filter((s) => isFinalRevisionStatus(s) && s !== 'DEPLOYED'),
);

/** What should run: the latest revision unless it failed, was skipped or interrupted; else the active one. */
function targetRevisionId(
  deployment: { latest_revision_id: string | null; active_revision_id: string | null },
  statusOf: (id: string) => RevisionStatus | undefined,
): string | null {
  const latest = deployment.latest_revision_id;
  const status = latest === null ? undefined : statusOf(latest);
  if (latest !== null && status !== undefined && !NOT_TO_RUN.has(status)) return latest;
  return deployment.active_revision_id;
}

/** An opaque validator of the whole body: any change of any field gives another one. */
function etagOf(state: DesiredState): string {
  return `"${createHash('sha256').update(JSON.stringify(state)).digest('base64url').slice(0, 32)}"`;
}

const stringOrNull = (value: unknown): string | null => (typeof value === 'string' ? value : null);
const objectOrNull = (value: unknown): Record<string, unknown> | null =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null;

// ----- status reports ----------------------------------------------------------------------------

export const REPORTED_STATUSES = [
  'AWAITING_DEPLOY',
  'DEPLOYING',
  'DEPLOYED',
  'DEPLOY_FAILED',
] as const satisfies readonly RevisionStatus[];
export type ReportedStatus = (typeof REPORTED_STATUSES)[number];

/** The states a listener may walk a revision through on its way to the reported one. */
const LISTENER_STEPS: ReadonlySet<RevisionStatus> = new Set(['AWAITING_DEPLOY', 'DEPLOYING']);

/**
 * The transitions from `from` to `to` through the state table, passing only through the listener's
 * own steps: [] when already there, null when `to` is not ahead of `from` (a stale or repeated report).
 */
export function stepsTo(from: RevisionStatus, to: RevisionStatus): RevisionStatus[] | null {
  if (from === to) return [];
  const cameFrom = new Map<RevisionStatus, RevisionStatus>();
  const queue: RevisionStatus[] = [from];
  while (queue.length > 0) {
    const at = queue.shift()!;
    for (const next of REVISION_STATES[at].next) {
      if (cameFrom.has(next) || next === from) continue;
      cameFrom.set(next, at);
      if (next === to) {
        const path: RevisionStatus[] = [to];
        for (let step = at; step !== from; step = cameFrom.get(step)!) path.unshift(step);
        return path;
      }
      if (LISTENER_STEPS.has(next)) queue.push(next);
    }
  }
  return null;
}

export interface ReportInput {
  revision_id: string;
  status: ReportedStatus;
  failure_reason?: string;
  message?: string;
}

/** Why a report changed nothing (reports are idempotent, and stale ones never overwrite newer state). */
export type NotAppliedReason = 'duplicate' | 'behind' | 'superseded' | 'final';

export interface ReportResult {
  applied: boolean;
  /** The revision's status after the report. */
  status: RevisionStatus;
  not_applied_reason: NotAppliedReason | null;
}

const DEFAULT_FAILURE_REASON = 'deploy_failed';

// ----- the service -------------------------------------------------------------------------------

export interface ListenerProtocolDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
}

export function createListenerProtocolService({ db, secretBox }: ListenerProtocolDeps) {
  /**
   * The image and secrets are the revision's; the in-place fields are the deployment's (every new
   * revision snapshots them from the deployment and a redeploy puts its snapshot back, so the two
   * differ only after an in-place patch, which must reach the cluster without a revision).
   */
  function desiredRevision(
    row: ListenerRevisionRow,
    inPlace: Pick<DesiredDeployment, 'resource_spec' | 'secret_references'>,
  ): DesiredRevision {
    return {
      id: row.id,
      number: row.number,
      status: row.status,
      image_uri: stringOrNull(row.source_revision_config.image_uri),
      secrets: row.secrets.map((s) => ({ name: s.name, value: secretBox.open(s.value) })),
      secret_references: inPlace.secret_references,
      resource_spec: inPlace.resource_spec,
    };
  }

  return {
    /** Everything the listener must run, with its ETag. */
    async desiredState(listenerId: string): Promise<{ state: DesiredState; etag: string }> {
      // One statement, one snapshot: a state mixed from before and after a patch could name no revision,
      // or the active one, which an agent would roll back to.
      const read = await listenerDeploymentsWithRevisions(db, listenerId);
      const deployments = read.deployments;
      const revisions = new Map(read.revisions.map((r) => [r.id, r]));
      const state: DesiredState = {
        protocol: PROTOCOL_VERSION,
        listener_id: listenerId,
        deployments: deployments.map((d) => {
          const target = targetRevisionId(d, (id) => revisions.get(id)?.status);
          const revision = target === null ? undefined : revisions.get(target);
          const listenerConfig = objectOrNull(d.source_config.listener_config);
          const inPlace = {
            resource_spec: objectOrNull(d.source_config.resource_spec),
            // Stored by the deployment service from validated input.
            secret_references: Array.isArray(d.secret_references) ? d.secret_references : null,
          };
          return {
            deployment_id: d.id,
            name: d.name,
            namespace: stringOrNull(listenerConfig?.k8s_namespace),
            delete: d.status === 'AWAITING_DELETE',
            custom_url: stringOrNull(d.source_config.custom_url),
            ...inPlace,
            revision: revision ? desiredRevision(revision, inPlace) : null,
          };
        }),
      };
      return { state, etag: etagOf(state) };
    },

    /** The credential is unrevoked and its listener still exists. */
    async credentialActive(credentialId: string): Promise<boolean> {
      return isListenerCredentialActive(db, credentialId);
    },

    /** A desired-state request: the agent is alive. */
    async seen(listenerId: string): Promise<void> {
      await markListenerSeen(db, listenerId);
    },

    /**
     * Moves the revision to the reported status through every step in between, each with its event.
     * DEPLOYED makes it the deployment's active revision and the deployment READY. The first report
     * applied for a revision interrupts older revisions still on their way (the listener replaced them).
     */
    async report(listenerId: string, input: ReportInput): Promise<ReportResult> {
      return db.transaction().execute(async (tx) => {
        const found = await findListenerRevision(tx, listenerId, input.revision_id);
        const deployment = found ? await lockDeployment(tx, found.workspace_id, found.deployment_id) : undefined;
        const revision = deployment ? await lockRevision(tx, input.revision_id) : undefined;
        if (!deployment || !revision) throw notFound('Revision', input.revision_id);
        const current = revision.status;
        const notApplied = (reason: NotAppliedReason): ReportResult => ({
          applied: false,
          status: current,
          not_applied_reason: reason,
        });
        if (isFinalRevisionStatus(current)) return notApplied('final');
        if (deployment.latest_revision_id !== revision.id) return notApplied('superseded');
        const steps = stepsTo(current, input.status);
        if (steps === null) return notApplied('behind');
        if (steps.length === 0) return notApplied('duplicate');

        const replaced = (await lockRevisionsInStatus(tx, deployment.id, [...LISTENER_STEPS])).filter(
          (r) => r.id !== revision.id,
        );
        for (const older of replaced) {
          await transitionRevision(tx, older, 'INTERRUPTED', {
            reason: 'superseded',
            message: `Revision ${revision.number} replaced it on the listener before it was deployed.`,
          });
        }
        let from = current;
        for (const to of steps) {
          const failure: Failure | null =
            to === 'DEPLOY_FAILED'
              ? {
                  reason: input.failure_reason ?? DEFAULT_FAILURE_REASON,
                  message: input.message ?? 'The listener reported that the deploy failed.',
                }
              : null;
          await transitionRevision(tx, { ...revision, status: from }, to, failure);
          from = to;
        }
        await recordEvents(tx, [
          {
            workspaceId: deployment.workspace_id,
            subjectType: 'revision',
            subjectId: revision.id,
            deploymentId: deployment.id,
            type: 'revision.reported',
            toStatus: input.status,
            data: {
              listener_id: listenerId,
              ...(input.failure_reason !== undefined ? { failure_reason: input.failure_reason } : {}),
              ...(input.message !== undefined ? { message: input.message } : {}),
            },
          },
        ]);
        if (input.status === 'DEPLOYED') await activateRevision(tx, deployment, revision.id);
        return { applied: true, status: input.status, not_applied_reason: null };
      });
    },

    /**
     * The listener removed everything of a deleted deployment: the row goes now (with its tracing
     * project when the delete asked for it). A deployment already gone is fine: the listener may retry.
     */
    async confirmDeletion(listenerId: string, workspaceId: string, deploymentId: string): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const row = await lockDeployment(tx, workspaceId, deploymentId);
        if (!row) return;
        if (row.listener_id !== listenerId) throw notFound('Deployment', deploymentId);
        if (row.status !== 'AWAITING_DELETE') {
          throw new AppError(
            'conflict',
            `Deployment ${deploymentId} is ${row.status}, not being deleted: only a deployment marked delete in the desired state can be confirmed deleted.`,
          );
        }
        await finishDeletion(tx, row, {
          deleteTracingProject: row.delete_tracing_project,
          confirmedByListener: listenerId,
        });
      });
    },

    /**
     * Seen now, with the agent's version and the namespaces it watches; an event when those change. A
     * heartbeat with `deployments` also says which serving revisions are not healthy
     * (src/service/listener-conditions.ts), unless an agent's heartbeat observed later already has.
     */
    async heartbeat(
      workspaceId: string,
      listenerId: string,
      input: {
        version: string;
        namespaces: string[];
        message?: string;
        deployments?: DeploymentConditionInput[];
        observed_at?: string;
      },
    ): Promise<ListenerView> {
      return db.transaction().execute(async (tx) => {
        const entries = input.deployments;
        // Deployments before their listener, as every writer locks them (see lockForConditions).
        const locked =
          entries === undefined
            ? null
            : await lockForConditions(tx, workspaceId, await conditionChanges(tx, listenerId, entries));
        const current = await lockListener(tx, workspaceId, listenerId);
        if (!current) throw notFound('Listener', listenerId);
        const observedAt = input.observed_at === undefined ? undefined : new Date(input.observed_at);
        const stale =
          observedAt !== undefined &&
          current.conditions_observed_at !== null &&
          observedAt.getTime() <= current.conditions_observed_at.getTime();
        if (entries !== undefined && locked !== null && !stale) await applyConditions(tx, listenerId, entries, locked);
        const updated = await recordListenerHeartbeat(tx, listenerId, {
          agentVersion: input.version,
          namespaces: input.namespaces,
          message: input.message ?? null,
          ...(entries !== undefined && observedAt !== undefined && !stale ? { conditionsObservedAt: observedAt } : {}),
        });
        const sameNamespaces = JSON.stringify(current.watched_namespaces) === JSON.stringify(input.namespaces);
        if (current.agent_version !== input.version || !sameNamespaces) {
          await recordEvents(tx, [
            {
              workspaceId,
              subjectType: 'listener',
              subjectId: listenerId,
              type: 'listener.agent_changed',
              data: {
                agent_version: input.version,
                watched_namespaces: input.namespaces,
                previous_agent_version: current.agent_version,
                previous_watched_namespaces: current.watched_namespaces,
              },
            },
          ]);
        }
        return updated;
      });
    },
  };
}

export type ListenerProtocolService = ReturnType<typeof createListenerProtocolService>;
