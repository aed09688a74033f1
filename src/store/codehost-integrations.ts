/**
 * Code-host integrations of a workspace. Credentials and the webhook secret arrive here already sealed
 * (src/crypto/secret-box.ts); this module never sees them in plaintext.
 */
import { sql } from 'kysely';
import type { SourceRevisionConfig } from '../domain/sources.ts';
import type { CodehostIntegrationRow, Db } from './schema.ts';

export async function getIntegration(db: Db, workspaceId: string, id: string) {
  return db
    .selectFrom('codehost_integrations')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .executeTakeFirst();
}

/**
 * By id alone, for the webhook endpoint: a delivery carries no API key, so no workspace; the signature
 * made with the integration's own secret is what authenticates it.
 */
export async function getIntegrationById(db: Db, id: string): Promise<CodehostIntegrationRow | undefined> {
  return db.selectFrom('codehost_integrations').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Locks the row for the rest of the transaction, against a concurrent delete. */
export async function lockIntegration(
  db: Db,
  workspaceId: string,
  id: string,
): Promise<CodehostIntegrationRow | undefined> {
  return db
    .selectFrom('codehost_integrations')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst();
}

/** A share lock: the integration cannot be deleted before a deployment that names it is stored. */
export async function shareLockIntegration(
  db: Db,
  workspaceId: string,
  id: string,
): Promise<CodehostIntegrationRow | undefined> {
  return db
    .selectFrom('codehost_integrations')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .forShare()
    .executeTakeFirst();
}

export interface NewIntegration {
  id: string;
  workspaceId: string;
  name: string;
  apiUrl: string;
  kind: 'token' | 'app';
  appId: string | null;
  installationId: string | null;
  credentialsSealed: string;
  webhookSecretSealed: string;
}

/** Null when the workspace already has an integration of that name. */
export async function insertIntegration(db: Db, integration: NewIntegration): Promise<CodehostIntegrationRow | null> {
  const row = await db
    .insertInto('codehost_integrations')
    .values({
      id: integration.id,
      workspace_id: integration.workspaceId,
      name: integration.name,
      api_url: integration.apiUrl,
      kind: integration.kind,
      app_id: integration.appId,
      installation_id: integration.installationId,
      credentials_encrypted: integration.credentialsSealed,
      webhook_secret_encrypted: integration.webhookSecretSealed,
    })
    // (workspace_id, name) is unique: a concurrent twin loses here, never by a read-then-write.
    .onConflict((oc) => oc.columns(['workspace_id', 'name']).doNothing())
    .returningAll()
    .executeTakeFirst();
  return row ?? null;
}

export async function listIntegrations(
  db: Db,
  workspaceId: string,
  limit: number,
  offset: number,
): Promise<CodehostIntegrationRow[]> {
  return db
    .selectFrom('codehost_integrations')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export interface IntegrationChange {
  name?: string;
  kind?: 'token' | 'app';
  appId?: string | null;
  installationId?: string | null;
  credentialsSealed?: string;
  webhookSecretSealed?: string;
}

/** Null when the new name is taken in the workspace. */
export async function updateIntegration(
  db: Db,
  id: string,
  change: IntegrationChange,
): Promise<CodehostIntegrationRow | null> {
  const set = {
    ...(change.name !== undefined ? { name: change.name } : {}),
    ...(change.kind !== undefined
      ? { kind: change.kind, app_id: change.appId ?? null, installation_id: change.installationId ?? null }
      : {}),
    ...(change.credentialsSealed !== undefined ? { credentials_encrypted: change.credentialsSealed } : {}),
    ...(change.webhookSecretSealed !== undefined ? { webhook_secret_encrypted: change.webhookSecretSealed } : {}),
    updated_at: sql<Date>`now()`,
  };
  try {
    return await db
      .updateTable('codehost_integrations')
      .set(set)
      .where('id', '=', id)
      .returningAll()
      .executeTakeFirstOrThrow();
  } catch (error) {
    if ((error as { code?: string }).code === '23505') return null;
    throw error;
  }
}

export async function deleteIntegration(db: Db, id: string): Promise<void> {
  await db.deleteFrom('codehost_integrations').where('id', '=', id).execute();
}

/** codehost deployments that name the integration (uses index deployments_codehost_integration). */
export async function deploymentsUsingIntegration(db: Db, id: string): Promise<{ id: string; name: string }[]> {
  return db
    .selectFrom('deployments')
    .select(['id', 'name'])
    .where('source', '=', 'codehost')
    .where(sql<string>`source_config ->> 'integration_id'`, '=', id)
    .orderBy('name')
    .execute();
}

export interface CodehostDeploymentOfIntegration {
  id: string;
  workspace_id: string;
  name: string;
  repo_url: string | null;
  build_on_push: boolean;
  latest_revision_source: string | null;
  latest_revision_config: SourceRevisionConfig | null;
}

/** The codehost deployments of an integration with their latest revision, for matching a push. */
export async function codehostDeploymentsOfIntegration(db: Db, id: string): Promise<CodehostDeploymentOfIntegration[]> {
  return (
    db
      .selectFrom('deployments as d')
      .leftJoin('revisions as r', 'r.id', 'd.latest_revision_id')
      .select([
        'd.id',
        'd.workspace_id',
        'd.name',
        sql<string | null>`d.source_config ->> 'repo_url'`.as('repo_url'),
        sql<boolean>`coalesce((d.source_config ->> 'build_on_push')::boolean, false)`.as('build_on_push'),
        'r.source as latest_revision_source',
        sql<SourceRevisionConfig | null>`r.source_revision_config`.as('latest_revision_config'),
      ])
      .where('d.source', '=', 'codehost')
      .where(sql<string>`d.source_config ->> 'integration_id'`, '=', id)
      // A fixed order, so that two deliveries building the same deployments lock them in the same order.
      .orderBy('d.id')
      .execute()
  );
}

/**
 * Which of the deployments already have a revision of the commit, by deployment id. The caller holds the
 * deployments' row locks, so a concurrent delivery of the same push sees the revisions this one adds.
 */
export async function deploymentsWithCommit(
  db: Db,
  deploymentIds: string[],
  commitSha: string,
): Promise<Map<string, string>> {
  if (deploymentIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('revisions')
    .select(['deployment_id', 'id'])
    .where('deployment_id', 'in', deploymentIds)
    .where(sql<string>`source_revision_config ->> 'repo_commit_sha'`, '=', commitSha)
    .orderBy('created_at', 'desc')
    .execute();
  const out = new Map<string, string>();
  for (const row of rows) if (!out.has(row.deployment_id)) out.set(row.deployment_id, row.id);
  return out;
}
