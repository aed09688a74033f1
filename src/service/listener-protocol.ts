/**
 * The listener protocol, version 1 (docs/listener-protocol.md): what a listener agent in a user's
 * cluster reads (its desired state) and writes (status reports, deletion confirmations, heartbeats).
 * Reports and deletion confirmations are the data-plane reports of src/service/lifecycle.ts, the same
 * operations the own data plane's worker calls in process, with the same rules; the heartbeat's
 * conditions move a deployment's status through the lifecycle's applyCondition. One transaction per
 * request, locking the deployment before its revisions (the order every writer uses).
 */
import { createHash } from 'node:crypto';
import { PROTOCOL_VERSION } from '@slipway/sdk/listener-protocol';
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { NotAppliedReason } from '../domain/data-plane.ts';
import { desiredDeploymentState } from '../domain/desired-state.ts';
import { notFound } from '../errors.ts';
import { applyConditions, conditionChanges, lockForConditions } from './listener-conditions.ts';
import { recordEvents } from '../store/events.ts';
import { isListenerCredentialActive } from '../store/listener-credentials.ts';
import {
  listenerDeploymentsWithRevisions,
  lockListener,
  markListenerSeen,
  recordListenerHeartbeat,
  type ListenerEndpointRow,
  type ListenerRevisionRow,
  type ListenerView,
} from '../store/listeners.ts';
import type { Database } from '../store/schema.ts';
import type {
  DesiredDeployment,
  DesiredEndpoint,
  DesiredEndpointRevision,
  DesiredRevision,
  DesiredState,
  EndpointReportBody,
  EndpointReportResult,
  HeartbeatBody,
  ReportBody,
  ReportResult,
} from '../routes/listener-protocol-schemas.ts';
import { createListenerReports } from './lifecycle-reports.ts';

export { stepsTo } from './lifecycle-reports.ts';

// ----- desired state -----------------------------------------------------------------------------

/** An opaque validator of the whole body: any change of any field gives another one. */
function etagOf(state: DesiredState): string {
  return `"${createHash('sha256').update(JSON.stringify(state)).digest('base64url').slice(0, 32)}"`;
}

const stringOrNull = (value: unknown): string | null => (typeof value === 'string' ? value : null);
const objectOrNull = (value: unknown): Record<string, unknown> | null =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null;

// ----- status reports ----------------------------------------------------------------------------

export type { NotAppliedReason };

// ----- the service -------------------------------------------------------------------------------

export interface ListenerProtocolDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  /**
   * What last_seen_at is dated by and a listener's state judged against (src/store/listeners.ts); the
   * database's `now()` when absent.
   */
  now?: Clock;
}

export function createListenerProtocolService({ db, secretBox, now }: ListenerProtocolDeps) {
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

  /** An endpoint's revision: its image and its own secrets (the revision's snapshot, as on the own plane). */
  function endpointRevision(revision: ListenerEndpointRow['revision']): DesiredEndpointRevision {
    return {
      id: revision.id,
      number: revision.number,
      image_uri: stringOrNull(revision.source_revision_config.image_uri),
      secrets: revision.secrets.map((s) => ({ name: s.name, value: secretBox.open(s.value) })),
    };
  }

  /** An endpoint as the listener serves it, with its split's revision given like the endpoint's own. */
  function desiredEndpoint(row: ListenerEndpointRow): DesiredEndpoint {
    return {
      name: row.name,
      revision: endpointRevision(row.revision),
      served_revision_id: row.served_revision_id,
      split:
        row.split === null
          ? null
          : {
              revision_id: row.split.revision.id,
              weight: row.split.weight,
              revision: endpointRevision(row.split.revision),
            },
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
          // The one rule of what should run, with which spec (src/domain/desired-state.ts).
          const desired = desiredDeploymentState(d, (id) => revisions.get(id)?.status);
          const target = desired.targetRevisionId;
          const revision = target === null ? undefined : revisions.get(target);
          const listenerConfig = objectOrNull(d.source_config.listener_config);
          const inPlace = { resource_spec: desired.resourceSpec, secret_references: desired.secretReferences };
          return {
            deployment_id: d.id,
            name: d.name,
            namespace: stringOrNull(listenerConfig?.k8s_namespace),
            delete: desired.delete && desired.dataPlane === 'listener',
            custom_url: stringOrNull(d.source_config.custom_url),
            ...inPlace,
            revision: revision ? desiredRevision(revision, inPlace) : null,
            // A deployment being deleted serves no endpoint: everything of it goes.
            endpoints: desired.delete ? [] : d.endpoints.map(desiredEndpoint),
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
      await markListenerSeen(db, listenerId, now);
    },

    /**
     * Moves the revision to the reported status through every step in between, each with its event.
     * DEPLOYED makes it the deployment's active revision and the deployment READY. The first report
     * applied for a revision interrupts older revisions still on their way (the listener replaced them).
     */
    async report(listenerId: string, input: ReportBody): Promise<ReportResult> {
      const outcome = await createListenerReports(db, { listenerId }).reportRevision({
        revisionId: input.revision_id,
        status: input.status,
        failure: {
          ...(input.failure_reason !== undefined ? { reason: input.failure_reason } : {}),
          ...(input.message !== undefined ? { message: input.message } : {}),
        },
      });
      return { applied: outcome.applied, status: outcome.status, not_applied_reason: outcome.notAppliedReason };
    },

    /** The endpoint's own Deployment serves its revision now, or cannot (src/service/lifecycle-endpoint-reports.ts). */
    async reportEndpoint(listenerId: string, input: EndpointReportBody): Promise<EndpointReportResult> {
      const target = {
        deploymentId: input.deployment_id,
        endpoint: input.endpoint,
        revisionId: input.revision_id,
        ...(input.split === undefined ? {} : { split: { weight: input.split.weight } }),
      };
      return createListenerReports(db, { listenerId }).reportEndpoint(
        input.status === 'SERVED'
          ? { ...target, served: true }
          : { ...target, served: false, message: input.message ?? 'the listener could not serve the revision' },
      );
    },

    /**
     * The listener removed everything of a deleted deployment: the row goes now (with its tracing
     * project when the delete asked for it). A deployment already gone is fine: the listener may retry.
     */
    async confirmDeletion(listenerId: string, workspaceId: string, deploymentId: string): Promise<void> {
      await createListenerReports(db, { listenerId, workspaceId }).confirmDeletion(deploymentId);
    },

    /**
     * Seen now, with the agent's version and the namespaces it watches; an event when those change. A
     * heartbeat with `deployments` also says which serving revisions are not healthy
     * (src/service/listener-conditions.ts), unless an agent's heartbeat observed later already has.
     */
    async heartbeat(workspaceId: string, listenerId: string, input: HeartbeatBody): Promise<ListenerView> {
      return db.transaction().execute(async (tx) => {
        const entries = input.deployments;
        // Deployments before their listener, as every writer locks them (see lockForConditions).
        const locked =
          entries === undefined
            ? null
            : await lockForConditions(tx, workspaceId, await conditionChanges(tx, listenerId, entries));
        const current = await lockListener(tx, workspaceId, listenerId, now);
        if (!current) throw notFound('Listener', listenerId);
        const observedAt = input.observed_at === undefined ? undefined : new Date(input.observed_at);
        const stale =
          observedAt !== undefined &&
          current.conditions_observed_at !== null &&
          observedAt.getTime() <= current.conditions_observed_at.getTime();
        if (entries !== undefined && locked !== null && !stale) await applyConditions(tx, listenerId, entries, locked);
        const updated = await recordListenerHeartbeat(
          tx,
          listenerId,
          {
            agentVersion: input.version,
            namespaces: input.namespaces,
            message: input.message ?? null,
            ...(entries !== undefined && observedAt !== undefined && !stale
              ? { conditionsObservedAt: observedAt }
              : {}),
          },
          now,
        );
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
