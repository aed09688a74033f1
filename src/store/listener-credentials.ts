/** Listener credentials: listener-scoped secrets (stored hashed) that listener agents present. */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, ListenerCredentialRow } from './schema.ts';

export type ListenerCredentialView = Omit<ListenerCredentialRow, 'credential_hash' | 'workspace_id'>;

const VISIBLE = [
  'id',
  'listener_id',
  'credential_prefix',
  'created_by',
  'created_at',
  'last_used_at',
  'revoked_at',
] as const;

/** How stale last_used_at may be: refreshing it on every long-poll would be a write per request. */
const LAST_USED_RESOLUTION_SECONDS = 60;

export async function insertListenerCredential(
  db: Db,
  credential: { workspaceId: string; listenerId: string; hash: Buffer; prefix: string; createdBy: string },
): Promise<ListenerCredentialView> {
  return db
    .insertInto('listener_credentials')
    .values({
      id: randomUUID(),
      workspace_id: credential.workspaceId,
      listener_id: credential.listenerId,
      credential_hash: credential.hash,
      credential_prefix: credential.prefix,
      created_by: credential.createdBy,
    })
    .returning(VISIBLE)
    .executeTakeFirstOrThrow();
}

export async function listListenerCredentials(
  db: Db,
  listenerId: string,
  limit: number,
  offset: number,
): Promise<ListenerCredentialView[]> {
  return db
    .selectFrom('listener_credentials')
    .select(VISIBLE)
    .where('listener_id', '=', listenerId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

/** Revokes an unrevoked credential of the listener; undefined when there is none by that id. */
export async function revokeListenerCredential(
  db: Db,
  listenerId: string,
  id: string,
): Promise<ListenerCredentialView | undefined> {
  return db
    .updateTable('listener_credentials')
    .set({ revoked_at: sql<Date>`now()` })
    .where('listener_id', '=', listenerId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returning(VISIBLE)
    .executeTakeFirst();
}

export interface ListenerCredentialIdentity {
  id: string;
  listener_id: string;
  workspace_id: string;
}

/**
 * The unrevoked credential with this hash (whose listener exists, since credentials go with it), in
 * one statement that also refreshes last_used_at when it is older than LAST_USED_RESOLUTION_SECONDS.
 */
export async function findActiveListenerCredential(
  db: Db,
  hash: Buffer,
): Promise<ListenerCredentialIdentity | undefined> {
  const result = await sql<ListenerCredentialIdentity>`
    with hit as (
      select id, listener_id, workspace_id from listener_credentials where credential_hash = ${hash} and revoked_at is null
    ), touched as (
      update listener_credentials set last_used_at = now()
      where id in (select id from hit)
        and (last_used_at is null or last_used_at < now() - make_interval(secs => ${LAST_USED_RESOLUTION_SECONDS}))
    )
    select id, listener_id, workspace_id from hit`.execute(db);
  return result.rows[0];
}

/**
 * Whether the credential is still unrevoked and its listener still there: a long-poll authenticated at
 * its start asks again before it answers, so that a revoke made while it waited is not answered with
 * the state (and its secrets).
 */
export async function isListenerCredentialActive(db: Db, id: string): Promise<boolean> {
  const row = await db
    .selectFrom('listener_credentials')
    .innerJoin('listeners', 'listeners.id', 'listener_credentials.listener_id')
    .select('listener_credentials.id')
    .where('listener_credentials.id', '=', id)
    .where('listener_credentials.revoked_at', 'is', null)
    .executeTakeFirst();
  return row !== undefined;
}
