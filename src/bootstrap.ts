/**
 * First start: a default organization, workspace and admin key, so a fresh installation is usable at
 * once (docs/api.md, "Authentication and tenancy"). The generated key is returned to the caller to hand over once; it is never stored.
 * A key supplied by configuration is made (or revived) as an admin key of the default workspace, and is
 * the only such key: changing or removing SLIPWAY_BOOTSTRAP_API_KEY revokes the one it replaced.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import type { Logger } from 'pino';
import { hashCredential, newCredential, shownPrefix } from './auth/credentials.ts';
import { BOOTSTRAP_LOCK } from './db/advisory-locks.ts';
import type { Database } from './store/schema.ts';
import { createApiKey, createOrganization, createWorkspace, defaultWorkspace, ensureKey } from './store/tenancy.ts';

/** How keys made from SLIPWAY_BOOTSTRAP_API_KEY are named, and found again when the value changes. */
const BOOTSTRAP_KEY_NAME = 'bootstrap (SLIPWAY_BOOTSTRAP_API_KEY)';

/** Where the first admin key goes when there is no terminal to show it on. */
const FIRST_KEY_FILE = 'first-admin-key';

export interface BootstrapResult {
  /** Set only on the very first start: the admin key to show the user once. */
  generatedKey: string | null;
  workspaceId: string;
  organizationId: string;
  /** Display prefixes of earlier bootstrap keys this start revoked (the configured value changed). */
  revokedBootstrapKeys: string[];
}

export async function bootstrap(db: Kysely<Database>, configuredKey: string | null): Promise<BootstrapResult> {
  return db.transaction().execute(async (tx) => {
    // Replicas starting together must not make two default organizations.
    await sql`select pg_advisory_xact_lock(${BOOTSTRAP_LOCK})`.execute(tx);
    let generatedKey: string | null = null;
    let workspace = await defaultWorkspace(tx);
    if (!workspace) {
      const organization = await createOrganization(tx, 'default');
      const created = await createWorkspace(tx, organization.id, 'default');
      workspace = { id: created.id, organization_id: organization.id };
      const made = newCredential('apiKey');
      generatedKey = made.value;
      await createApiKey(tx, {
        organizationId: organization.id,
        workspaceId: null,
        name: 'admin (first start)',
        role: 'admin',
        hash: made.hash,
        prefix: made.prefix,
      });
    }
    const hash = configuredKey === null ? null : hashCredential(configuredKey);
    // The configured value is the only bootstrap key: a rotated (or removed) one must stop working.
    const revoked = await tx
      .updateTable('api_keys')
      .set({ revoked_at: new Date() })
      .where('workspace_id', '=', workspace.id)
      .where('name', '=', BOOTSTRAP_KEY_NAME)
      .where('revoked_at', 'is', null)
      .$if(hash !== null, (qb) => qb.where('key_hash', '!=', hash!))
      .returning('key_prefix')
      .execute();
    if (configuredKey !== null) {
      await ensureKey(tx, {
        organizationId: workspace.organization_id,
        workspaceId: workspace.id,
        name: BOOTSTRAP_KEY_NAME,
        hash: hash!,
        prefix: shownPrefix('apiKey', configuredKey),
      });
    }
    return {
      generatedKey,
      workspaceId: workspace.id,
      organizationId: workspace.organization_id,
      revokedBootstrapKeys: revoked.map((r) => r.key_prefix),
    };
  });
}

/**
 * Hands the first admin key over once. On a terminal it is printed; otherwise stdout is a log
 * collector (systemd, a container), where a credential must not go: it is written to a file only the
 * service's user can read, and the log says where.
 */
export async function handOverFirstKey(
  key: string,
  dataDir: string,
  logger: Pick<Logger, 'warn'>,
  terminal: boolean = process.stdout.isTTY === true,
): Promise<void> {
  if (terminal) {
    // What must reach the terminal, not the log: the one place stdout is written directly.
    process.stdout.write(
      `\nSlipway's first start made an organization, a workspace and this admin API key:\n\n    ${key}\n\n` +
        'Keep it now; it will not be shown again. Use it as the X-Api-Key header.\n\n',
    );
    return;
  }
  const file = path.join(dataDir, FIRST_KEY_FILE);
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  // Replace any older file (it names a key of a database that no longer exists) with a 0600 one.
  await fs.rm(file, { force: true });
  await fs.writeFile(file, `${key}\n`, { mode: 0o600, flag: 'wx' });
  logger.warn(
    { file },
    `the first start made an organization admin API key and wrote it to ${file} (readable by this user only): keep it somewhere safe, then delete the file`,
  );
}
