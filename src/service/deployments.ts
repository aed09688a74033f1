/**
 * Deployment operations: each checks its input with the domain rules, then writes everything it
 * changes (deployment, revision, tracing project, events) in one transaction. How a revision is
 * written is src/service/deployment-revisions.ts, what a patch changes src/service/deployment-patch.ts.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { RepositoryUrlCheck } from '../codehost/github-client.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { mergeSecrets, planCreate, type CreateInput, type Secret } from '../domain/deployment-plan.ts';
import { pendingDeletionFinisher } from '../domain/deletion.ts';
import { scaleOfSpec } from '../domain/resource-spec.ts';
import { DEFAULT_DEPLOYMENT_TYPE, imageVersionOf } from '../domain/sources.ts';
import { UNFINISHED_REVISION_STATUSES, isFinalRevisionStatus, type RevisionStatus } from '../domain/states.ts';
import { AppError, notFound } from '../errors.ts';
import { endRevisionsLeftFor, startDeletion, transitionRevision } from './lifecycle.ts';
import {
  getDeployment,
  insertDeployment,
  listDeployments,
  lockDeployment,
  updateDeployment,
  type DeploymentFilter,
  type DeploymentView,
} from '../store/deployments.ts';
import { listDeploymentEvents, recordEvents, type EventInput } from '../store/events.ts';
import {
  getRevision,
  listRevisions,
  lockRevision,
  lockRevisionsInStatus,
  type RevisionView,
} from '../store/revisions.ts';
import type { CodehostIntegrationRow, Database, Db, StoredSecret } from '../store/schema.ts';
import { ensureTracingProject } from '../store/tracing-projects.ts';
import {
  SNAPSHOT_CONFIG_FIELDS,
  addRevision,
  checkRevisionReferences,
  restoreSnapshot,
  snapshotOf,
} from './deployment-revisions.ts';
import type { Page } from './page.ts';
import { checkResourceLimits, type ResourcePolicy } from './resource-quotas.ts';
import type { WriteConditions } from './preconditions.ts';
import { sourceReferenceChecks } from './deployment-source-checks.ts';
import { applyPatch, type PatchDeploymentInput, type PatchOptions } from './deployment-patch.ts';
import { assertNotPreviewRevision } from './preview-endpoints.ts';

/**
 * Asks a code host whether a repository URL names a repository the integration reaches
 * (src/service/codehost-integrations.ts). Throws AppError when the host fails or rejects the credentials.
 */
export interface RepositoryChecker {
  checkRepositoryUrl(integration: CodehostIntegrationRow, repoUrl: string): Promise<RepositoryUrlCheck>;
}

export interface DeploymentServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  /** Required to create codehost deployments; tools that make other sources only may leave it out. */
  repositories?: RepositoryChecker;
  /**
   * The operator's maxima and what a silent spec counts against a quota (resourcePolicyOf(config)).
   * createServices always passes it; tools and tests that build the service alone may leave it out,
   * and their specs are then checked against neither.
   */
  resources?: ResourcePolicy;
}

/** Without a checker a codehost create fails loudly rather than skipping the host check. */
const noRepositoryChecker: RepositoryChecker = {
  checkRepositoryUrl: async () => {
    throw new Error(
      'createDeploymentService was built without a RepositoryChecker, so it cannot check a codehost repo_url',
    );
  },
};

export interface CreateDeploymentInput extends CreateInput {
  name: string;
  secrets?: Secret[] | null;
}

export type { PatchDeploymentInput, PatchOptions } from './deployment-patch.ts';

export function createDeploymentService({
  db,
  secretBox,
  repositories = noRepositoryChecker,
  resources,
}: DeploymentServiceDeps) {
  const seal = (secrets: Secret[]): StoredSecret[] =>
    secrets.map((s) => ({ name: s.name, value: secretBox.seal(s.value) }));

  const { checkListener, checkRepository, checkIntegration } = sourceReferenceChecks(db, repositories);

  async function read(workspaceId: string, id: string, from: Db = db): Promise<DeploymentView> {
    const view = await getDeployment(from, workspaceId, id);
    if (!view) throw notFound('Deployment', id);
    return view;
  }

  return {
    get: read,

    /** Newest first; filters combine with AND (src/store/deployments.ts says which index serves each). */
    list: (workspaceId: string, filter: DeploymentFilter, page: Page): Promise<DeploymentView[]> =>
      listDeployments(db, workspaceId, filter, page.limit, page.offset),

    /** Newest first; 404 when the deployment is not the workspace's. */
    async listRevisions(
      workspaceId: string,
      deploymentId: string,
      filter: { statuses?: RevisionStatus[]; remoteReconciled?: boolean },
      page: Page,
    ): Promise<RevisionView[]> {
      const rows = await listRevisions(db, workspaceId, deploymentId, filter, page.limit, page.offset);
      // Revisions found prove the deployment is the caller's (they are read joined to it, in the
      // workspace); only an empty page needs the lookup that tells "none" from 404. One query, not two.
      if (rows.length === 0) await read(workspaceId, deploymentId);
      return rows;
    },

    /** 404 names the deployment when it is the one missing, else the revision. */
    async getRevision(workspaceId: string, deploymentId: string, revisionId: string): Promise<RevisionView> {
      const revision = await getRevision(db, workspaceId, deploymentId, revisionId);
      if (revision) return revision;
      await read(workspaceId, deploymentId);
      throw notFound('Revision', revisionId);
    },

    /** The deployment's events and its revisions', oldest first. */
    async listEvents(workspaceId: string, deploymentId: string, page: Page, order: 'asc' | 'desc' = 'asc') {
      await read(workspaceId, deploymentId);
      return listDeploymentEvents(db, workspaceId, deploymentId, page.limit, page.offset, order);
    },

    async create(workspaceId: string, input: CreateDeploymentInput): Promise<DeploymentView> {
      const plan = planCreate(input);
      const secrets = mergeSecrets([], input.secrets ?? []).secrets;
      const secretReferences = input.secret_references ?? null;
      const id = randomUUID();
      const revisionId = plan.revision ? randomUUID() : null;
      await checkRepository(workspaceId, plan.sourceConfig);
      await db.transaction().execute(async (tx) => {
        const sourceConfig = await checkListener(tx, workspaceId, plan.sourceConfig);
        if (resources) await checkResourceLimits(tx, resources, workspaceId, sourceConfig, null);
        await checkIntegration(tx, workspaceId, sourceConfig);
        if (plan.revision) await checkRevisionReferences(tx, workspaceId, plan.revision);
        const tracingProjectId = await ensureTracingProject(tx, workspaceId, input.name);
        const sealed = seal(secrets);
        const inserted = await insertDeployment(tx, {
          id,
          workspaceId,
          name: input.name,
          source: input.source,
          sourceConfig,
          deploymentType: sourceConfig.deployment_type ?? DEFAULT_DEPLOYMENT_TYPE,
          listenerId: sourceConfig.listener_id ?? null,
          status: 'AWAITING_DATABASE',
          secrets: sealed,
          secretReferences,
          tracingProjectId,
          latestRevisionId: revisionId,
          imageVersion: imageVersionOf(plan.revision?.config ?? null),
        });
        if (!inserted) throw new AppError('conflict', `A deployment named '${input.name}' already exists.`);
        const created: EventInput = {
          workspaceId,
          subjectType: 'deployment',
          subjectId: id,
          deploymentId: id,
          type: 'deployment.created',
          toStatus: 'AWAITING_DATABASE',
          data: { source: input.source, tracing_project_id: tracingProjectId },
        };
        if (plan.revision && revisionId) {
          // The row already names revision 1 (the foreign key is checked at commit).
          await addRevision(
            tx,
            { id, workspace_id: workspaceId },
            plan.revision,
            sealed,
            snapshotOf(sourceConfig, secretReferences),
            { cause: 'create' },
            { id: revisionId, events: [created] },
          );
        } else {
          await recordEvents(tx, [created]);
        }
      });
      return read(workspaceId, id);
    },

    async patch(
      workspaceId: string,
      id: string,
      input: PatchDeploymentInput,
      options: PatchOptions = {},
    ): Promise<DeploymentView> {
      const apply = (tx: Db) => applyPatch(tx, { secretBox, resources }, workspaceId, id, input, options);
      if (options.tx) {
        await apply(options.tx);
        return read(workspaceId, id, options.tx);
      }
      await db.transaction().execute(apply);
      return read(workspaceId, id);
    },

    /**
     * Delete. Its unfinished revisions are interrupted and the deployment goes AWAITING_DELETE; who
     * ends the deletion is the one rule of src/domain/deletion.ts, applied by the lifecycle's
     * startDeletion: a deployment the local data plane has worked on (it has a database or app files, or
     * a revision was claimed) is torn down by the worker (processes, database, files), which then
     * removes the row; a listener deployment whose listener has ever called stays AWAITING_DELETE
     * (`delete: true` in the desired state) until the listener confirms it has removed everything
     * (src/service/listener-protocol.ts). Anything else is removed at once.
     */
    async remove(
      workspaceId: string,
      id: string,
      options: { deleteTracingProject: boolean } & WriteConditions,
    ): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const row = await lockDeployment(tx, workspaceId, id);
        if (!row) throw notFound('Deployment', id);
        await options.precondition?.(tx);
        // Deleting again is fine: the deletion under way goes on.
        if (pendingDeletionFinisher(row) !== null) return;
        const unfinished = await lockRevisionsInStatus(tx, id, UNFINISHED_REVISION_STATUSES);
        for (const revision of unfinished) {
          await transitionRevision(tx, revision, 'INTERRUPTED', {
            reason: 'deployment_deleted',
            message: 'The deployment was deleted.',
          });
        }
        await startDeletion(tx, row, { deleteTracingProject: options.deleteTracingProject });
      });
    },

    ...revisionActions(db, read),
  };
}

export type DeploymentService = ReturnType<typeof createDeploymentService>;

/** What a user asks of one revision: deploy it again (a rollback), or interrupt it. */
function revisionActions(
  db: Kysely<Database>,
  read: (workspaceId: string, id: string, from?: Db) => Promise<DeploymentView>,
) {
  return {
    /** A new revision that runs exactly what an earlier one ran: its config, secrets and resource spec. */
    async redeploy(workspaceId: string, id: string, revisionId: string): Promise<DeploymentView> {
      await db.transaction().execute(async (tx) => {
        const row = await lockDeployment(tx, workspaceId, id);
        if (!row) throw notFound('Deployment', id);
        const old = await lockRevision(tx, revisionId);
        if (!old || old.deployment_id !== id) throw notFound('Revision', revisionId);
        assertNotPreviewRevision(old, null);
        // A rollback is whole (docs/lifecycle.md, "What a redeploy restores"): everything the snapshot
        // holds goes back onto the deployment, whose in-place fields (resource_spec) the data planes run,
        // and a later secrets-only patch (which snapshots the deployment) keeps the rollback. Only the
        // scale stays the deployment's, and the new revision's snapshot says so.
        const sourceConfig = restoreSnapshot(row.source_config, old.snapshot);
        const snapshot = { ...old.snapshot, resource_spec: sourceConfig.resource_spec ?? null };
        await updateDeployment(tx, id, {
          secrets: old.secrets,
          sourceConfig,
          secretReferences: snapshot.secret_references ?? null,
        });
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'deployment',
            subjectId: id,
            deploymentId: id,
            type: 'deployment.updated',
            data: {
              fields: ['secrets', 'secret_references', ...SNAPSHOT_CONFIG_FIELDS.map((f) => `source_config.${f}`)],
              restored_from_revision: revisionId,
              kept_scale: scaleOfSpec(row.source_config.resource_spec),
            },
          },
        ]);
        // reuse_build_of: the data plane copies that revision's build output when it still has it.
        await addRevision(
          tx,
          row,
          { source: old.source, config: old.source_revision_config },
          old.secrets,
          { ...snapshot, reuse_build_of: revisionId },
          { cause: 'redeploy', revision_id: revisionId },
        );
      });
      return read(workspaceId, id);
    },

    /** A user cancels a revision that has not reached a final state; returns it as it is then. */
    async interrupt(workspaceId: string, id: string, revisionId: string): Promise<RevisionView> {
      await db.transaction().execute(async (tx) => {
        const row = await lockDeployment(tx, workspaceId, id);
        if (!row) throw notFound('Deployment', id);
        const revision = await lockRevision(tx, revisionId);
        if (!revision || revision.deployment_id !== id) throw notFound('Revision', revisionId);
        if (isFinalRevisionStatus(revision.status)) {
          throw new AppError('conflict', `Revision ${revisionId} is already ${revision.status}.`);
        }
        await transitionRevision(tx, revision, 'INTERRUPTED', {
          reason: 'interrupted_by_user',
          message: 'Interrupted by a user.',
        });
        await endRevisionsLeftFor(tx, row, { ...revision, status: 'INTERRUPTED' });
      });
      const revision = await getRevision(db, workspaceId, id, revisionId);
      if (!revision) throw notFound('Revision', revisionId);
      return revision;
    },
  };
}
