/**
 * Applies the numbered plain-SQL files of `migrations/` in order, each in its own transaction, under a
 * PostgreSQL advisory lock so that several replicas starting at once apply each file exactly once. A
 * migration that fails rolls back whole: the database stays as the previous one left it, and the next
 * start tries it again (test/ops/upgrade.test.ts).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { MIGRATION_LOCK } from './advisory-locks.ts';

const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations');

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

export async function readMigrations(dir: string = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await fs.readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = /^(\d+)_([\w-]+)\.sql$/.exec(file);
    if (!match) throw new Error(`Migration file name must be NNN_name.sql: ${file}`);
    const id = Number(match[1]);
    if (migrations.some((m) => m.id === id)) throw new Error(`Two migrations share the number ${id}`);
    migrations.push({ id, name: match[2]!, sql: await fs.readFile(path.join(dir, file), 'utf8') });
  }
  return migrations;
}

export interface MigrateOptions {
  /** The folder of NNN_name.sql files (tests use others). */
  dir?: string;
  /** Applies migrations up to this id only (a restore first rebuilds the schema its backup was made on). */
  upTo?: number;
}

const CREATE_LEDGER = `create table if not exists slipway_migrations (
  id integer primary key, name text not null, applied_at timestamptz not null default now())`;

async function applyOne(client: pg.ClientBase, migration: Migration): Promise<void> {
  await client.query(migration.sql);
  await client.query('insert into slipway_migrations (id, name) values ($1, $2)', [migration.id, migration.name]);
}

function failure(migration: Migration, error: unknown): Error {
  return new Error(`Migration ${migration.id}_${migration.name} failed: ${(error as Error).message}`, { cause: error });
}

/** The migrations applied to the database, in order (empty when it has none). */
export async function appliedMigrations(client: pg.ClientBase): Promise<{ id: number; name: string }[]> {
  const ledger = await client.query<{ found: string | null }>("select to_regclass('slipway_migrations') as found");
  if (ledger.rows[0]?.found == null) return [];
  return (await client.query<{ id: number; name: string }>('select id, name from slipway_migrations order by id')).rows;
}

/**
 * Applies the migrations up to `upTo` inside the caller's open transaction, on a database that has
 * none yet: whatever the caller does next in that transaction (a restore loading its rows) commits or
 * rolls back with the schema.
 */
export async function migrateWithin(client: pg.ClientBase, options: MigrateOptions = {}): Promise<number[]> {
  const migrations = (await readMigrations(options.dir)).filter(
    (m) => options.upTo === undefined || m.id <= options.upTo,
  );
  await client.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
  await client.query(CREATE_LEDGER);
  const done = new Set((await appliedMigrations(client)).map((m) => m.id));
  const applied: number[] = [];
  for (const migration of migrations) {
    if (done.has(migration.id)) continue;
    try {
      await applyOne(client, migration);
    } catch (error) {
      throw failure(migration, error);
    }
    applied.push(migration.id);
  }
  return applied;
}

/** Brings the database up to date; returns the ids applied by this call. */
export async function migrate(pool: pg.Pool, dirOrOptions: string | MigrateOptions = {}): Promise<number[]> {
  const options = typeof dirOrOptions === 'string' ? { dir: dirOrOptions } : dirOrOptions;
  const migrations = (await readMigrations(options.dir)).filter(
    (m) => options.upTo === undefined || m.id <= options.upTo,
  );
  const client = await pool.connect();
  const applied: number[] = [];
  try {
    // Replicas starting at once wait here; each then finds what the first applied in the ledger.
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await client.query(CREATE_LEDGER);
    const done = new Set((await appliedMigrations(client)).map((m) => m.id));
    for (const migration of migrations) {
      if (done.has(migration.id)) continue;
      await client.query('begin');
      try {
        await applyOne(client, migration);
        await client.query('commit');
      } catch (error) {
        await client.query('rollback');
        throw failure(migration, error);
      }
      applied.push(migration.id);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {
      // The lock dies with the session anyway; releasing the client below ends it.
    });
    client.release();
  }
  return applied;
}
