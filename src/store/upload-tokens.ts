/**
 * Upload URL tokens (migrations/009_upload_tokens.sql): issued for one object of one deployment, used
 * at most once, before they expire. Lookups go by the token's hash; the token itself is never stored.
 */
import { sql } from 'kysely';
import type { Clock } from '../clock.ts';
import type { Db } from './schema.ts';
import { sqlNow } from './sql-now.ts';

export interface NewUploadToken {
  id: string;
  workspaceId: string;
  deploymentId: string;
  tokenHash: Buffer;
  objectPath: string;
  expiresAt: Date;
}

/** Stores a token; tokens that expired a day ago or more go at the same time (nothing else prunes them). */
export async function insertUploadToken(db: Db, token: NewUploadToken): Promise<void> {
  await db
    .deleteFrom('upload_tokens')
    .where('expires_at', '<', sql<Date>`now() - interval '1 day'`)
    .execute();
  await db
    .insertInto('upload_tokens')
    .values({
      id: token.id,
      workspace_id: token.workspaceId,
      deployment_id: token.deploymentId,
      token_hash: token.tokenHash,
      object_path: token.objectPath,
      expires_at: token.expiresAt,
    })
    .execute();
}

/**
 * Marks the token of upload `id` used, when it is that upload's, unused and not expired: in one
 * statement, so two requests with the same token cannot both win. The upload it may write, or undefined.
 * Expiry goes by the database's `now()`, or by `clock` when given (src/store/sql-now.ts).
 */
export async function consumeUploadToken(
  db: Db,
  id: string,
  tokenHash: Buffer,
  clock?: Clock,
): Promise<{ workspace_id: string; deployment_id: string; object_path: string } | undefined> {
  const now = sqlNow(clock);
  return db
    .updateTable('upload_tokens')
    .set({ used_at: now })
    .where('id', '=', id)
    .where('token_hash', '=', tokenHash)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returning(['workspace_id', 'deployment_id', 'object_path'])
    .executeTakeFirst();
}
