/**
 * First start: a default organization, workspace and admin key, so a fresh installation is usable at
 * once (contract.md). The generated key is returned to the caller to print once; it is never stored.
 * A key supplied by configuration is made (or revived) as an admin key of the default workspace.
 */
import { sql, type Kysely } from 'kysely';
import { displayPrefix, generateApiKey, hashApiKey } from './auth/api-keys.ts';
import type { Database } from './store/schema.ts';
import { createApiKey, createOrganization, createWorkspace, defaultWorkspace, ensureKey } from './store/tenancy.ts';

const BOOTSTRAP_LOCK_KEY = 7_342_002;

export interface BootstrapResult {
  /** Set only on the very first start: the admin key to show the user once. */
  generatedKey: string | null;
  workspaceId: string;
  organizationId: string;
}

export async function bootstrap(db: Kysely<Database>, configuredKey: string | null): Promise<BootstrapResult> {
  return db.transaction().execute(async (tx) => {
    // Replicas starting together must not make two default organizations.
    await sql`select pg_advisory_xact_lock(${BOOTSTRAP_LOCK_KEY})`.execute(tx);
    let generatedKey: string | null = null;
    let workspace = await defaultWorkspace(tx);
    if (!workspace) {
      const organization = await createOrganization(tx, 'default');
      const created = await createWorkspace(tx, organization.id, 'default');
      workspace = { id: created.id, organization_id: organization.id };
      generatedKey = generateApiKey();
      await createApiKey(tx, { organizationId: organization.id, workspaceId: null, name: 'admin (first start)', role: 'admin', hash: hashApiKey(generatedKey), prefix: displayPrefix(generatedKey) });
    }
    if (configuredKey !== null) {
      await ensureKey(tx, { organizationId: workspace.organization_id, workspaceId: workspace.id, name: 'bootstrap (SLIPWAY_BOOTSTRAP_API_KEY)', hash: hashApiKey(configuredKey), prefix: displayPrefix(configuredKey) });
    }
    return { generatedKey, workspaceId: workspace.id, organizationId: workspace.organization_id };
  });
}
