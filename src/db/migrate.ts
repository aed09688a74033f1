/**
 * Applies the numbered plain-SQL files of `migrations/` in order, each in its own transaction, under a
 * PostgreSQL advisory lock so that several replicas starting at once apply each file exactly once.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations');

/** Arbitrary constant naming Slipway's migration lock among other advisory locks of the server. */
const MIGRATION_LOCK_KEY = 7_342_001;

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

async function readMigrations(dir: string = MIGRATIONS_DIR): Promise<Migration[]> {
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

/** Brings the database up to date; returns the ids applied by this call. */
export async function migrate(pool: pg.Pool, dir: string = MIGRATIONS_DIR): Promise<number[]> {
  const migrations = await readMigrations(dir);
  const client = await pool.connect();
  const applied: number[] = [];
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    await client.query(`create table if not exists slipway_migrations (
      id integer primary key, name text not null, applied_at timestamptz not null default now())`);
    const done = new Set(
      (await client.query<{ id: number }>('select id from slipway_migrations')).rows.map((r) => r.id),
    );
    for (const migration of migrations) {
      if (done.has(migration.id)) continue;
      await client.query('begin');
      try {
        await client.query(migration.sql);
        await client.query('insert into slipway_migrations (id, name) values ($1, $2)', [migration.id, migration.name]);
        await client.query('commit');
      } catch (error) {
        await client.query('rollback');
        throw new Error(`Migration ${migration.id}_${migration.name} failed: ${(error as Error).message}`, {
          cause: error,
        });
      }
      applied.push(migration.id);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => {
      // The lock dies with the session anyway; releasing the client below ends it.
    });
    client.release();
  }
  return applied;
}
