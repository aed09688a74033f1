/**
 * The key check row (migrations/007_key_check.sql): which key the sealed values are sealed with, and
 * the key a rotation in progress moves them to. The rules are in src/crypto/key-check.ts.
 */
import { sql } from 'kysely';
import type { Db } from './schema.ts';

export interface KeyCheck {
  keyId: string;
  checkValue: string;
  rotatingTo: string | null;
}

export async function readKeyCheck(db: Db): Promise<KeyCheck | null> {
  const row = await db.selectFrom('key_check').select(['key_id', 'check_value', 'rotating_to']).executeTakeFirst();
  return row ? { keyId: row.key_id, checkValue: row.check_value, rotatingTo: row.rotating_to } : null;
}

/** Records the key unless a row exists already (a replica starting at the same time won). */
export async function recordKeyCheck(db: Db, keyId: string, checkValue: string): Promise<void> {
  await db
    .insertInto('key_check')
    .values({ key_id: keyId, check_value: checkValue })
    .onConflict((oc) => oc.column('singleton').doNothing())
    .execute();
}

/** A rotation to `keyId` has begun: from now on both keys are needed. */
export async function markRotation(db: Db, keyId: string): Promise<void> {
  await db
    .updateTable('key_check')
    .set({ rotating_to: keyId, updated_at: sql<Date>`now()` })
    .execute();
}

/** Every sealed value is sealed with `keyId` now: it alone is needed from here on. */
export async function completeRotation(db: Db, keyId: string, checkValue: string): Promise<void> {
  await db
    .updateTable('key_check')
    .set({ key_id: keyId, check_value: checkValue, rotating_to: null, updated_at: sql<Date>`now()` })
    .execute();
}
