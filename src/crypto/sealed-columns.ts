/**
 * Every column holding values sealed by the secret box (src/crypto/secret-box.ts), in one list: the
 * key check looks here for a value to try a key on, and a key rotation re-encrypts what it names.
 * A new sealed column must be added here, or a rotation would leave it under the old key.
 */
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../store/schema.ts';

/** Text columns holding one sealed value each (or null). */
interface TextColumns {
  kind: 'text';
  table: keyof Database;
  /** Primary key (uuid): rotation walks the table in its order. */
  key: string;
  columns: readonly string[];
}

/** A jsonb array of `{name, value}` whose values are sealed (deployment and revision secrets). */
interface SecretListColumn {
  kind: 'secrets';
  table: keyof Database;
  key: string;
  column: string;
}

export type SealedColumns = TextColumns | SecretListColumn;

export const SEALED_COLUMNS: readonly SealedColumns[] = [
  { kind: 'secrets', table: 'deployments', key: 'id', column: 'secrets' },
  { kind: 'secrets', table: 'revisions', key: 'id', column: 'secrets' },
  { kind: 'text', table: 'oauth_providers', key: 'id', columns: ['client_secret_encrypted'] },
  { kind: 'text', table: 'oauth_tokens', key: 'id', columns: ['access_token_encrypted', 'refresh_token_encrypted'] },
  { kind: 'text', table: 'oauth_authorizations', key: 'id', columns: ['code_verifier_encrypted'] },
  {
    kind: 'text',
    table: 'codehost_integrations',
    key: 'id',
    columns: ['credentials_encrypted', 'webhook_secret_encrypted'],
  },
  {
    kind: 'text',
    table: 'deployment_runtimes',
    key: 'deployment_id',
    columns: ['database_password_sealed', 'agent_credential_sealed'],
  },
];

export const describeColumns = (spec: SealedColumns): string =>
  spec.kind === 'secrets' ? `${spec.table}.${spec.column}` : spec.columns.map((c) => `${spec.table}.${c}`).join(', ');

/** Values sealed with key `keyId` start so (src/crypto/secret-box.ts); the id is hex, free of LIKE's wildcards. */
const prefixOf = (keyId: string): string => `v2.${keyId}.%`;

/** SQL: the row holds a sealed value not sealed with `keyId`. */
function needsResealing(spec: SealedColumns, keyId: string): RawBuilder<boolean> {
  const prefix = prefixOf(keyId);
  if (spec.kind === 'secrets') {
    return sql<boolean>`exists (select 1 from jsonb_array_elements(${sql.ref(spec.column)}) as s where s->>'value' not like ${prefix})`;
  }
  return sql<boolean>`(${sql.join(
    spec.columns.map((c) => sql`(${sql.ref(c)} is not null and ${sql.ref(c)} not like ${prefix})`),
    sql` or `,
  )})`;
}

/** One sealed value from anywhere in the database, or null when none is stored. */
export async function firstSealedValue(db: Kysely<Database>): Promise<{ value: string; where: string } | null> {
  for (const spec of SEALED_COLUMNS) {
    if (spec.kind === 'secrets') {
      const found = await sql<{
        value: string;
      }>`select s->>'value' as value from ${sql.table(spec.table)}, jsonb_array_elements(${sql.ref(spec.column)}) as s limit 1`.execute(
        db,
      );
      if (found.rows[0]) return { value: found.rows[0].value, where: `${spec.table}.${spec.column}` };
      continue;
    }
    for (const column of spec.columns) {
      const found = await sql<{
        value: string;
      }>`select ${sql.ref(column)} as value from ${sql.table(spec.table)} where ${sql.ref(column)} is not null limit 1`.execute(
        db,
      );
      if (found.rows[0]) return { value: found.rows[0].value, where: `${spec.table}.${column}` };
    }
  }
  return null;
}

/** How many rows of each column group still hold a value not sealed with `keyId`. */
export async function countNotSealedWith(
  db: Kysely<Database>,
  keyId: string,
): Promise<{ columns: string; rows: number }[]> {
  const counts = [];
  for (const spec of SEALED_COLUMNS) {
    const result = await sql<{
      n: string;
    }>`select count(*) as n from ${sql.table(spec.table)} where ${needsResealing(spec, keyId)}`.execute(db);
    counts.push({ columns: describeColumns(spec), rows: Number(result.rows[0]?.n ?? 0) });
  }
  return counts;
}

/**
 * Re-seals up to `limit` rows after key `after` (in key order) that hold a value not sealed with
 * `keyId`, in one transaction with the rows locked: a concurrent write to a row waits, and whatever it
 * writes is sealed with a key the rotation accepts. Returns the rows done and the last key seen (null
 * when the table has no more).
 */
export async function resealBatch(
  db: Kysely<Database>,
  spec: SealedColumns,
  keyId: string,
  reseal: (sealed: string) => string,
  after: string | null,
  limit: number,
): Promise<{ rows: number; last: string | null }> {
  return db.transaction().execute(async (tx) => {
    const columns = spec.kind === 'secrets' ? [spec.column] : spec.columns;
    const selected = await sql<Record<string, unknown>>`
      select ${sql.ref(spec.key)}::text as row_key, ${sql.join(columns.map((c) => sql.ref(c)))}
      from ${sql.table(spec.table)}
      where ${needsResealing(spec, keyId)} and (${after}::uuid is null or ${sql.ref(spec.key)} > ${after}::uuid)
      order by ${sql.ref(spec.key)}
      limit ${limit}
      for update`.execute(tx);
    for (const row of selected.rows) {
      const rowKey = row.row_key as string;
      if (spec.kind === 'secrets') {
        const secrets = row[spec.column] as { name: string; value: string }[];
        const fresh = secrets.map((s) => ({ ...s, value: reseal(s.value) }));
        await sql`update ${sql.table(spec.table)} set ${sql.ref(spec.column)} = ${JSON.stringify(fresh)}::jsonb
          where ${sql.ref(spec.key)} = ${rowKey}::uuid`.execute(tx);
      } else {
        const sets = spec.columns.map((c) => {
          const value = row[c] as string | null;
          return sql`${sql.ref(c)} = ${value === null ? null : reseal(value)}`;
        });
        await sql`update ${sql.table(spec.table)} set ${sql.join(sets)} where ${sql.ref(spec.key)} = ${rowKey}::uuid`.execute(
          tx,
        );
      }
    }
    const last = selected.rows.at(-1)?.row_key as string | undefined;
    return { rows: selected.rows.length, last: last ?? null };
  });
}
