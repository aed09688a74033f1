/**
 * An experiment, not production (bench flag `--prepared-statements`): what the service would gain if
 * every statement were a named prepared statement, parsed and planned once per connection.
 *
 * node-postgres sends a statement without a name as an unnamed statement, which PostgreSQL parses and
 * plans anew each time; for the small reads of this API, planning is most of the database's work. A
 * name per SQL text (a hash of it) makes node-postgres prepare each text once per connection and only
 * bind and execute it afterwards. Before this could go into src/db/database.ts it needs answers for:
 * a statement prepared before a migration that changes a selected table fails once with "cached plan
 * must not change result type"; generic plans (after five executions) can be worse for skewed
 * filters; PgBouncer in transaction mode needs version 1.21 or later. docs/performance.md has the numbers.
 */
import { createHash } from 'node:crypto';
import type { PostgresPool, PostgresPoolClient } from 'kysely';
import type pg from 'pg';

const names = new Map<string, string>();

/** A stable name for a SQL text (memoised: the service sends a few dozen distinct texts). */
export function statementName(sql: string): string {
  let name = names.get(sql);
  if (name === undefined) {
    name = `k${createHash('sha1').update(sql).digest('base64url')}`;
    if (names.size < 10_000) names.set(sql, name);
  }
  return name;
}

/** The pool as Kysely's PostgresDialect sees it, with every statement sent as a named one. */
export function preparingPool(pool: pg.Pool): PostgresPool {
  return {
    async connect() {
      const client = await pool.connect();
      const query = (sql: string, parameters: readonly unknown[]) =>
        client.query({ name: statementName(sql), text: sql, values: [...parameters] });
      return { query, release: () => client.release() } as unknown as PostgresPoolClient;
    },
    end: () => pool.end(),
  };
}
