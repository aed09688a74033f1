/**
 * The rows of the service's database, out and in, for `slipway backup` and `slipway restore`.
 *
 * Out: every table of the service's schema (the migrations' ledger aside) is read inside one
 * REPEATABLE READ transaction, so all of them come from one snapshot, as pg_dump reads them. Rows are
 * written as JSON lines (`row_to_json`), which any PostgreSQL version writes and reads the same way.
 * The schema is not dumped: it is the migrations', and the manifest names the version.
 *
 * In: inside the caller's transaction, on a database migrated to the backup's schema version: the
 * foreign keys are dropped, every table's rows inserted (`json_populate_recordset`), the foreign keys
 * added again (which checks every reference of the archive), and the sequences set past the highest
 * id. A failure anywhere rolls all of it back.
 *
 * Why not pg_dump for this database: pg_dump refuses servers newer than itself, and the embedded
 * server (PostgreSQL 17, src/db/embedded-postgres.ts) ships without one; a Debian 12 machine's is 15.
 */
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import readline from 'node:readline';
import type pg from 'pg';

/** Rows read from a cursor at once at most, and about the bytes per batch aimed at (uploads are ~1 MiB rows). */
const MAX_ROWS_PER_FETCH = 1000;
const BYTES_PER_BATCH = 8 * 1024 * 1024;

/** The tables holding the service's data, by name: the current schema's, without the ledger. */
export async function serviceTables(client: pg.ClientBase): Promise<string[]> {
  const result = await client.query<{ name: string }>(
    `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = current_schema() and c.relkind in ('r', 'p') and c.relname <> 'slipway_migrations'
      order by c.relname`,
  );
  return result.rows.map((r) => r.name);
}

/** Writes the table's rows to `file` as JSON lines; the caller holds the snapshot (an open transaction). */
export async function dumpTable(client: pg.ClientBase, table: string, file: string): Promise<number> {
  const handle = await fs.open(file, 'wx', 0o600);
  let rows = 0;
  try {
    const name = client.escapeIdentifier(table);
    await client.query(`declare slipway_dump no scroll cursor for select row_to_json(t)::text as r from ${name} t`);
    let count = 100;
    for (;;) {
      const batch = await client.query<{ r: string }>(`fetch ${count} from slipway_dump`);
      if (batch.rows.length === 0) break;
      let bytes = 0;
      const text = batch.rows.map((row) => {
        bytes += row.r.length;
        return row.r;
      });
      await handle.write(text.join('\n') + '\n');
      rows += batch.rows.length;
      // Next batch of about BYTES_PER_BATCH, from this one's average row.
      count = Math.max(
        1,
        Math.min(MAX_ROWS_PER_FETCH, Math.floor(BYTES_PER_BATCH / Math.max(1, bytes / batch.rows.length))),
      );
    }
    await client.query('close slipway_dump');
    await handle.sync();
  } finally {
    await handle.close();
  }
  return rows;
}

interface ForeignKey {
  table: string;
  name: string;
  definition: string;
}

async function foreignKeys(client: pg.ClientBase): Promise<ForeignKey[]> {
  const result = await client.query<ForeignKey>(
    `select c.conrelid::regclass::text as table, c.conname as name, pg_get_constraintdef(c.oid) as definition
       from pg_constraint c join pg_namespace n on n.oid = c.connamespace
      where c.contype = 'f' and n.nspname = current_schema() order by 1, 2`,
  );
  return result.rows;
}

/** The columns a row may be given: not generated ones. */
async function writableColumns(client: pg.ClientBase, table: string): Promise<string[]> {
  const result = await client.query<{ name: string }>(
    `select attname as name from pg_attribute
      where attrelid = $1::regclass and attnum > 0 and not attisdropped and attgenerated = ''
      order by attnum`,
    [table],
  );
  return result.rows.map((r) => r.name);
}

async function insertBatch(client: pg.ClientBase, table: string, columns: string[], lines: string[]): Promise<void> {
  if (lines.length === 0) return;
  const name = client.escapeIdentifier(table);
  const list = columns.map((c) => client.escapeIdentifier(c)).join(', ');
  await client.query(
    `insert into ${name} (${list}) overriding system value
     select ${list} from json_populate_recordset(null::${name}, $1::json)`,
    [`[${lines.join(',')}]`],
  );
}

/** Inserts the JSON lines of `file` into `table`; returns the rows inserted. */
async function loadTable(client: pg.ClientBase, table: string, file: string): Promise<number> {
  const columns = await writableColumns(client, table);
  let rows = 0;
  let batch: string[] = [];
  let bytes = 0;
  const lines = readline.createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  for await (const line of lines) {
    if (line === '') continue;
    batch.push(line);
    bytes += line.length;
    rows += 1;
    if (bytes >= BYTES_PER_BATCH || batch.length >= MAX_ROWS_PER_FETCH) {
      await insertBatch(client, table, columns, batch);
      batch = [];
      bytes = 0;
    }
  }
  await insertBatch(client, table, columns, batch);
  return rows;
}

/** Sets every sequence owned by a column past the column's highest value. */
async function resetSequences(client: pg.ClientBase): Promise<void> {
  const owned = await client.query<{ table: string; column: string; sequence: string }>(
    `select c.relname as table, a.attname as column, pg_get_serial_sequence(quote_ident(c.relname), a.attname) as sequence
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
       join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      where n.nspname = current_schema() and c.relkind in ('r', 'p')
        and pg_get_serial_sequence(quote_ident(c.relname), a.attname) is not null`,
  );
  for (const { table, column, sequence } of owned.rows) {
    await client.query(
      `select setval($1::regclass, coalesce((select max(${client.escapeIdentifier(column)}) from ${client.escapeIdentifier(table)}), 0) + 1, false)`,
      [sequence],
    );
  }
}

/**
 * Loads every table's rows inside the caller's transaction. `files` maps each table to its JSON lines;
 * it must name exactly the tables of the schema (the caller checks the manifest against it).
 */
export async function loadTables(client: pg.ClientBase, files: Map<string, string>): Promise<Map<string, number>> {
  const keys = await foreignKeys(client);
  for (const key of keys)
    await client.query(`alter table ${key.table} drop constraint ${client.escapeIdentifier(key.name)}`);
  const counts = new Map<string, number>();
  for (const [table, file] of files) counts.set(table, await loadTable(client, table, file));
  // Added again, and so checked: a row pointing at nothing fails the whole restore.
  for (const key of keys)
    await client.query(
      `alter table ${key.table} add constraint ${client.escapeIdentifier(key.name)} ${key.definition}`,
    );
  await resetSequences(client);
  return counts;
}
