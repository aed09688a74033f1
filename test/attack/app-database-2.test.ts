/**
 * Attack by an app's own code on what its database login tells it of other tenants. Every deployment's
 * database and role are named `slw_app_<its deployment id>` on the server the apps share, and
 * src/dataplane/app-database.ts hides the catalogs that list the server's databases from an app's role
 * so that it cannot enumerate the other deployments. The role catalogs list the same names.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { withClient } from '../../src/db/admin-client.ts';
import {
  appDatabaseUrl,
  createAppDatabase,
  dropAppDatabase,
  type AppDatabase,
} from '../../src/dataplane/app-database.ts';
import { createTestDatabase, type TestDatabase } from '../helpers.ts';

let server: TestDatabase;
let attacker: AppDatabase;
let victim: AppDatabase;

before(async () => {
  server = await createTestDatabase();
  attacker = await createAppDatabase(server.pool, randomUUID());
  victim = await createAppDatabase(server.pool, randomUUID());
});
after(async () => {
  for (const made of [attacker, victim]) if (made) await dropAppDatabase(server.pool, made.name).catch(() => undefined);
  await server?.drop();
});

test(
  "an app's database login does not list the other deployments' databases or roles",
  {
    todo: "finding: pg_roles (and pg_user, pg_auth_members) stay readable by PUBLIC and name every deployment's role, which is its database's name (src/dataplane/app-database.ts DATABASE_LISTS)",
  },
  async () => {
    const seen = await withClient(appDatabaseUrl(server.url, attacker), async (client) => {
      const names: string[] = [];
      for (const query of [
        'select datname as name from pg_catalog.pg_database',
        'select rolname as name from pg_catalog.pg_roles',
        'select usename as name from pg_catalog.pg_user',
      ]) {
        // A catalog the app may not read is what the service wants: nothing listed.
        const rows = await client.query<{ name: string }>(query).then(
          (result) => result.rows,
          () => [],
        );
        names.push(...rows.map((row) => row.name));
      }
      // The honest part: the app's own login works and knows itself.
      const me = await client.query<{ me: string }>('select current_user as me');
      assert.equal(me.rows[0]!.me, attacker.role);
      return names;
    });
    assert.ok(!seen.includes(victim.name), `the app listed another deployment's database or role (${victim.name})`);
  },
);
