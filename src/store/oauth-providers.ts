/** OAuth providers: identity providers of an organization, named by a slug (`provider_id`) or by id. */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type Db, type OAuthProviderRow, type OAuthProviderTable } from './schema.ts';

/** The settings a create or an update writes; the client secret already sealed. */
export type ProviderSettings = Omit<
  OAuthProviderTable,
  'id' | 'organization_id' | 'created_at' | 'updated_at' | 'scopes'
> & { scopes: string[] };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export async function insertProvider(
  db: Db,
  organizationId: string,
  settings: ProviderSettings,
): Promise<OAuthProviderRow | null> {
  const row = await db
    .insertInto('oauth_providers')
    .values({ id: randomUUID(), organization_id: organizationId, ...settings, scopes: json(settings.scopes) })
    // (organization_id, provider_id) is unique: a concurrent twin loses here, never by a read-then-write.
    .onConflict((oc) => oc.columns(['organization_id', 'provider_id']).doNothing())
    .returningAll()
    .executeTakeFirst();
  return row ?? null;
}

/** By slug, or by id when `ref` is a UUID (slugs shaped like a UUID are refused at create). */
export async function findProvider(
  db: Db,
  organizationId: string,
  ref: string,
  options: { lock?: boolean } = {},
): Promise<OAuthProviderRow | undefined> {
  let query = db
    .selectFrom('oauth_providers')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where((eb) => (UUID.test(ref) ? eb('id', '=', ref.toLowerCase()) : eb('provider_id', '=', ref)));
  if (options.lock) query = query.forUpdate();
  return query.executeTakeFirst();
}

export async function getProviderById(db: Db, id: string): Promise<OAuthProviderRow | undefined> {
  return db.selectFrom('oauth_providers').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function listProviders(
  db: Db,
  organizationId: string,
  limit: number,
  offset: number,
): Promise<OAuthProviderRow[]> {
  return db
    .selectFrom('oauth_providers')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function updateProvider(
  db: Db,
  id: string,
  settings: Partial<ProviderSettings>,
): Promise<OAuthProviderRow> {
  const { scopes, ...rest } = settings;
  return db
    .updateTable('oauth_providers')
    .set({ ...rest, ...(scopes !== undefined ? { scopes: json(scopes) } : {}), updated_at: sql<Date>`now()` })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Tokens of the provider in every workspace: a provider with tokens is not deleted under them. */
export async function countProviderTokens(db: Db, id: string): Promise<number> {
  const row = await db
    .selectFrom('oauth_tokens')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('provider_id', '=', id)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function deleteProvider(db: Db, id: string): Promise<void> {
  await db.deleteFrom('oauth_providers').where('id', '=', id).execute();
}
