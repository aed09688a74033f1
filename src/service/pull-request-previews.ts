/**
 * Pull-request previews (docs/codehost.md, "Pull-request previews"). A signed `pull_request` delivery for the
 * repository of a build_on_push codehost deployment builds a revision of the pull request's head commit,
 * marked as that pull request's preview (revisions.preview_pull_request): it supersedes only older commits of
 * the same pull request, never becomes the deployment's latest or active revision, and once built it is
 * served at the endpoint `pr-<number>` (src/service/preview-endpoints.ts). Closing the pull request (merged or
 * not) removes the endpoint, whose instances the own data plane then stops, and interrupts what was still
 * being built. The state goes back to the pull request as a commit status (src/service/preview-statuses.ts).
 *
 * The usual CI rule: a pull request whose head lives in another repository (a fork) runs without the
 * deployment's secrets, database and agent credential, unless the deployment's preview settings allow it.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import { previewAction, previewEndpointName, type PullRequestEvent } from '../codehost/pull-request-event.ts';
import { sameRepository } from '../codehost/repository-url.ts';
import { DELETING_STATUS, dataPlaneOf } from '../domain/deletion.ts';
import { endpointNameProblem } from '../domain/endpoints.ts';
import { SUPERSEDABLE_REVISION_STATUSES, UNFINISHED_REVISION_STATUSES } from '../domain/states.ts';
import { AppError, notFound } from '../errors.ts';
import { deleteEndpoint, getEndpoint, listEndpoints } from '../store/deployment-endpoints.ts';
import { lockDeployment } from '../store/deployments.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import {
  deletePreview,
  getPreview,
  getPreviewSettings,
  listPreviews,
  savePreview,
  savePreviewSettings,
  type PreviewSettings,
} from '../store/pull-request-previews.ts';
import { codehostDeploymentsOfIntegration } from '../store/codehost-integrations.ts';
import { insertRevision, lockRevision, lockRevisionsInStatus } from '../store/revisions.ts';
import type { Database, DeploymentRow, PullRequestPreviewRow } from '../store/schema.ts';
import type { DeliveryFacts, DeliveryResult } from '../store/webhook-deliveries.ts';
import { snapshotOf } from './deployment-revisions.ts';
import { endpointUrl } from './deployment-endpoints.ts';
import { NEW_REVISION_STATUS, newRevisionEvents, transitionRevision } from './lifecycle.ts';
import { endpointQuotaProblems, type ResourcePolicy } from './resource-quotas.ts';

export interface PreviewServiceDeps {
  db: Kysely<Database>;
  /** Previews a deployment keeps at once unless its settings say otherwise (SLIPWAY_PREVIEWS_PER_DEPLOYMENT). */
  defaultMaxPreviews: number;
  /** The workspace quotas: a new preview runs a copy of its deployment's instances. Null: none applied. */
  resources?: ResourcePolicy | null;
}

/** What a delivery does, decided inside its transaction (as in src/service/codehost-webhooks.ts). */
export type PreviewDecision = DeliveryResult & { refusal?: AppError };

export interface PreviewSettingsView {
  deployment_id: string;
  /** The deployment's own limit, or null for the service's default. */
  max_previews: number | null;
  /** The limit that applies. */
  effective_max_previews: number;
  fork_secrets: boolean;
}

export interface PreviewView extends PullRequestPreviewRow {
  endpoint: string;
  url: string | null;
  secrets: boolean;
  served_revision_id: string | null;
}

const shortSha = (sha: string): string => sha.slice(0, 12);

function event(
  deployment: Pick<DeploymentRow, 'id' | 'workspace_id'>,
  type: EventInput['type'],
  data: Record<string, unknown>,
): EventInput {
  return {
    workspaceId: deployment.workspace_id,
    subjectType: 'deployment',
    subjectId: deployment.id,
    deploymentId: deployment.id,
    type,
    data,
  };
}

/** Interrupts the preview's revisions that have not ended (an older commit's, or the closed one's). */
async function endUnfinished(tx: Transaction<Database>, deploymentId: string, number: number, keep: string | null) {
  const unfinished = await lockRevisionsInStatus(tx, deploymentId, UNFINISHED_REVISION_STATUSES);
  for (const revision of unfinished.filter((r) => r.preview_pull_request === number && r.id !== keep)) {
    const queued = (SUPERSEDABLE_REVISION_STATUSES as readonly string[]).includes(revision.status);
    await transitionRevision(
      tx,
      revision,
      queued && keep !== null ? 'SKIPPED' : 'INTERRUPTED',
      keep !== null
        ? {
            reason: 'superseded',
            message: `Superseded by revision ${keep} of a newer commit of pull request #${number}.`,
          }
        : { reason: 'pull_request_closed', message: `Pull request #${number} was closed.` },
    );
  }
}

/** One deployment's preview of the pull request: built, or refused with the reason its status will say. */
async function buildOne(
  { defaultMaxPreviews, resources }: { defaultMaxPreviews: number; resources: ResourcePolicy | null },
  tx: Transaction<Database>,
  deployment: DeploymentRow,
  pr: PullRequestEvent,
  cause: Record<string, unknown>,
): Promise<{ revisionId: string | null; refused: string | null; alreadyBuilt: boolean }> {
  const existing = await getPreview(tx, deployment.id, pr.number);
  // A commit builds once per preview: a replayed delivery under a new id builds nothing again.
  if (existing && existing.head_sha === pr.headSha && existing.revision_id !== null)
    return { revisionId: existing.revision_id, refused: null, alreadyBuilt: true };
  const settings = await getPreviewSettings(tx, deployment.id);
  const limit = settings.max_previews ?? defaultMaxPreviews;
  const name = previewEndpointName(pr.number);
  const common = {
    deploymentId: deployment.id,
    pullRequest: pr.number,
    repository: pr.repository.full_name,
    headSha: pr.headSha,
    headRepository: pr.headRepository ?? '(deleted fork)',
    fromFork: pr.fromFork,
  };
  const refuse = async (reason: string, message: string) => {
    await savePreview(tx, { ...common, revisionId: null, refusedMessage: message });
    await recordEvents(tx, [
      event(deployment, 'deployment.preview_refused', { pull_request: pr.number, reason, message }),
    ]);
    return { revisionId: null, refused: message, alreadyBuilt: false };
  };
  if (limit === 0)
    return refuse('previews_off', `Previews are off for deployment '${deployment.name}' (max_previews is 0).`);
  // Over the limit the new pull request is refused; the open previews are kept (docs/codehost.md).
  const holding = (await listPreviews(tx, deployment.id)).filter(
    (p) => p.pull_request !== pr.number && p.revision_id !== null,
  );
  if (!(existing && existing.revision_id !== null) && holding.length >= limit)
    return refuse(
      'preview_limit',
      `Deployment '${deployment.name}' keeps at most ${limit} previews and has ${holding.length} ` +
        `(${holding.map((p) => `#${p.pull_request}`).join(', ')}); close one, or raise max_previews.`,
    );
  const nameProblem = endpointNameProblem(name, deployment.app_slug);
  if (nameProblem) return refuse('endpoint_name', `No preview: ${nameProblem}.`);
  // A new preview is one more endpoint, held to the workspace's quota as one made by hand
  // (checkEndpointQuota); a new commit of an open one replaces its instances and takes nothing more.
  if (!(existing && existing.revision_id !== null) && resources) {
    const over = await endpointQuotaProblems(
      tx,
      resources,
      deployment.workspace_id,
      deployment.source_config.resource_spec ?? null,
      'this preview',
    );
    if (over.length > 0) return refuse('quota_exceeded', `No preview: ${over.map((issue) => issue.msg).join('; ')}.`);
  }

  const latest = deployment.latest_revision_id ? await lockRevision(tx, deployment.latest_revision_id) : undefined;
  const frameworkConfigPath = latest?.source_revision_config.framework_config_path;
  if (!frameworkConfigPath)
    return refuse(
      'no_revision',
      `Deployment '${deployment.name}' has no codehost revision to take its config path from.`,
    );
  const secrets = !pr.fromFork || settings.fork_secrets;
  const id = randomUUID();
  await endUnfinished(tx, deployment.id, pr.number, id);
  await insertRevision(tx, {
    id,
    deploymentId: deployment.id,
    workspaceId: deployment.workspace_id,
    status: NEW_REVISION_STATUS,
    source: 'codehost',
    // The head commit itself, not a branch: a fork's branch is not in the base repository, and a later
    // push is another delivery.
    config: { repo_ref: pr.headSha, framework_config_path: frameworkConfigPath, repo_commit_sha: pr.headSha },
    snapshot: {
      ...snapshotOf(deployment.source_config, deployment.secret_references),
      preview: { pull_request: pr.number, from_fork: pr.fromFork, secrets },
    },
    secrets: secrets ? deployment.secrets : [],
    previewPullRequest: pr.number,
  });
  await savePreview(tx, { ...common, revisionId: id, refusedMessage: null });
  await recordEvents(tx, [
    ...newRevisionEvents({ id, workspace_id: deployment.workspace_id, deployment_id: deployment.id }, cause),
    event(deployment, 'deployment.preview_built', {
      pull_request: pr.number,
      endpoint: name,
      head_sha: pr.headSha,
      revision_id: id,
      from_fork: pr.fromFork,
      secrets,
    }),
  ]);
  return { revisionId: id, refused: null, alreadyBuilt: false };
}

/** Removes the pull request's preview of one deployment; false when it had none. */
async function removeOne(tx: Transaction<Database>, deployment: DeploymentRow, pr: PullRequestEvent, merged: boolean) {
  const preview = await getPreview(tx, deployment.id, pr.number);
  if (!preview) return false;
  const name = previewEndpointName(pr.number);
  const endpoint = await getEndpoint(tx, deployment.id, name);
  await endUnfinished(tx, deployment.id, pr.number, null);
  await deletePreview(tx, deployment.id, pr.number);
  // The own data plane stops the endpoint's instances once its row is gone (src/dataplane/endpoint-apps.ts).
  if (endpoint) await deleteEndpoint(tx, deployment.id, name);
  await recordEvents(tx, [
    event(deployment, 'deployment.preview_removed', {
      pull_request: pr.number,
      endpoint: name,
      merged,
      revision_id: endpoint?.revision_id ?? preview.revision_id,
    }),
  ]);
  return true;
}

/** The deployment's previews, oldest first. */
async function listPreviewViews(
  db: Kysely<Database>,
  workspaceId: string,
  deploymentId: string,
): Promise<PreviewView[]> {
  const deployment = await db
    .selectFrom('deployments')
    .select(['id', 'app_slug', 'source_config'])
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', deploymentId)
    .executeTakeFirst();
  if (!deployment) throw notFound('Deployment', deploymentId);
  const rows = await listPreviews(db, deploymentId);
  const endpoints = new Map(
    (await listEndpoints(db, deploymentId)).map((e) => [e.name, e.served_revision_id] as const),
  );
  const revisions = rows.some((r) => r.revision_id !== null)
    ? await db
        .selectFrom('revisions')
        .select(['id', 'snapshot'])
        .where(
          'id',
          'in',
          rows.flatMap((r) => (r.revision_id ? [r.revision_id] : [])),
        )
        .execute()
    : [];
  const secretsOf = new Map(revisions.map((r) => [r.id, r.snapshot.preview?.secrets ?? false] as const));
  return rows.map((row) => {
    const endpoint = previewEndpointName(row.pull_request);
    return {
      ...row,
      endpoint,
      url: endpointUrl(deployment, endpoint),
      secrets: row.revision_id ? (secretsOf.get(row.revision_id) ?? false) : false,
      served_revision_id: endpoints.get(endpoint) ?? null,
    };
  });
}

export function createPreviewService({ db, defaultMaxPreviews, resources = null }: PreviewServiceDeps) {
  const settingsView = (deploymentId: string, settings: PreviewSettings): PreviewSettingsView => ({
    deployment_id: deploymentId,
    max_previews: settings.max_previews,
    effective_max_previews: settings.max_previews ?? defaultMaxPreviews,
    fork_secrets: settings.fork_secrets,
  });

  return {
    /**
     * What a signed `pull_request` delivery does, in the delivery's transaction (src/service/codehost-webhooks.ts
     * records the outcome with it).
     */
    async decide(
      tx: Transaction<Database>,
      facts: DeliveryFacts & { deliveryId: string },
      workspaceId: string,
      pr: PullRequestEvent,
      merged: boolean,
    ): Promise<PreviewDecision> {
      const repository = pr.repository.full_name;
      const forRepo = (await codehostDeploymentsOfIntegration(tx, facts.integrationId)).filter(
        (d) =>
          d.workspace_id === workspaceId &&
          d.repo_url !== null &&
          (sameRepository(pr.repository.html_url, d.repo_url) || sameRepository(pr.repository.clone_url, d.repo_url)),
      );
      if (forRepo.length === 0) {
        const message = `No codehost deployment of this integration uses the repository ${repository} (${pr.repository.html_url}).`;
        return {
          outcome: 'rejected',
          reason: 'unknown_repository',
          message,
          refusal: new AppError('not_found', message),
        };
      }
      const action = previewAction(pr.action);
      if (action === 'none')
        return {
          outcome: 'ignored',
          reason: 'pull_request_action',
          message: `A pull request '${pr.action}' changes no preview; opened, synchronize, reopened and closed do.`,
        };
      // Locked in id order (codehostDeploymentsOfIntegration's), as pushes lock them.
      const locked: DeploymentRow[] = [];
      for (const d of forRepo) {
        const row = await lockDeployment(tx, workspaceId, d.id);
        if (row && row.status !== DELETING_STATUS && dataPlaneOf(row) === 'local') locked.push(row);
      }
      if (action === 'remove') {
        const removed: string[] = [];
        for (const row of locked) if (await removeOne(tx, row, pr, merged)) removed.push(`'${row.name}'`);
        return removed.length === 0
          ? { outcome: 'ignored', reason: 'no_preview', message: `Pull request #${pr.number} had no preview.` }
          : {
              outcome: 'ignored',
              reason: 'preview_removed',
              message: `Pull request #${pr.number} was ${merged ? 'merged' : 'closed'}: its preview of ${removed.join(', ')} was removed.`,
            };
      }
      const building = locked.filter((d) => d.source_config.build_on_push === true);
      if (building.length === 0)
        return {
          outcome: 'ignored',
          reason: 'build_on_push_off',
          message: `No deployment of ${repository} has source_config.build_on_push set; previews need it.`,
        };
      const cause = {
        cause: 'pull_request',
        integration_id: facts.integrationId,
        delivery_id: facts.deliveryId,
        pull_request: pr.number,
        commit_sha: pr.headSha,
      };
      const revisionIds: string[] = [];
      const refused: string[] = [];
      for (const row of building) {
        const result = await buildOne({ defaultMaxPreviews, resources }, tx, row, pr, cause);
        if (result.refused !== null) refused.push(`'${row.name}': ${result.refused}`);
        else if (!result.alreadyBuilt && result.revisionId !== null) revisionIds.push(result.revisionId);
      }
      if (revisionIds.length > 0)
        return {
          outcome: 'revision_created',
          reason: 'pull_request',
          message:
            `Commit ${shortSha(pr.headSha)} of pull request #${pr.number} created ${revisionIds.length} preview revision(s).` +
            (refused.length > 0 ? ` Refused: ${refused.join('; ')}` : ''),
          revisionIds,
        };
      if (refused.length > 0)
        return { outcome: 'ignored', reason: 'preview_refused', message: `No preview: ${refused.join('; ')}` };
      return {
        outcome: 'ignored',
        reason: 'commit_already_built',
        message: `Commit ${shortSha(pr.headSha)} of pull request #${pr.number} already has its preview.`,
      };
    },

    /** The deployment's previews, oldest first. */
    list: (workspaceId: string, deploymentId: string) => listPreviewViews(db, workspaceId, deploymentId),

    async getSettings(workspaceId: string, deploymentId: string): Promise<PreviewSettingsView> {
      const row = await db
        .selectFrom('deployments')
        .select('id')
        .where('workspace_id', '=', workspaceId)
        .where('id', '=', deploymentId)
        .executeTakeFirst();
      if (!row) throw notFound('Deployment', deploymentId);
      return settingsView(deploymentId, await getPreviewSettings(db, deploymentId));
    },

    async updateSettings(
      workspaceId: string,
      deploymentId: string,
      patch: { max_previews?: number | null; fork_secrets?: boolean },
      actor: { keyId: string; keyName: string },
    ): Promise<PreviewSettingsView> {
      return db.transaction().execute(async (tx) => {
        const deployment = await lockDeployment(tx, workspaceId, deploymentId);
        if (!deployment || deployment.status === DELETING_STATUS) throw notFound('Deployment', deploymentId);
        if (deployment.source !== 'codehost')
          throw new AppError('invalid_request', 'Previews are for codehost deployments; this deployment is not one.');
        const before = await getPreviewSettings(tx, deploymentId);
        const next: PreviewSettings = {
          max_previews: patch.max_previews === undefined ? before.max_previews : patch.max_previews,
          fork_secrets: patch.fork_secrets ?? before.fork_secrets,
        };
        if (next.max_previews !== before.max_previews || next.fork_secrets !== before.fork_secrets) {
          await savePreviewSettings(tx, deploymentId, next);
          await recordEvents(tx, [
            event(deployment, 'deployment.preview_settings_changed', {
              max_previews: next.max_previews,
              fork_secrets: next.fork_secrets,
              by: { api_key_id: actor.keyId, name: actor.keyName },
            }),
          ]);
        }
        return settingsView(deploymentId, next);
      });
    },
  };
}

export type PreviewService = ReturnType<typeof createPreviewService>;
