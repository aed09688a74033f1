/**
 * The service's one-off PostgreSQL clients (src/db/admin-client.ts, and the app-database clients built
 * on it) when the server ends their connection between two queries: a database dropped WITH (FORCE)
 * while a deployment is deleted, an operator's pg_terminate_backend, a server restart. pg emits 'error'
 * then; with no listener that is an uncaught exception, which ended the whole service (and, in the
 * suite, a test file whose tests had all passed). The loss must show where it belongs: the next query.
 */
import assert from 'node:assert/strict';
import { withClient } from '../../src/db/admin-client.ts';
import { createTestDatabase } from '../helpers.ts';
import { test } from '../support/limited-test.ts';

test("a connection the server ends between queries fails the client's next query, not the process", async () => {
  const database = await createTestDatabase();
  try {
    await withClient(database.url, async (client) => {
      const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
      const pid = rows[0]!.pid;
      // pg emits 'error' (with no listener: an uncaught exception) as the server's notice of the end
      // arrives while the client is idle, then 'end' once the socket is closed.
      // (Not events.once: it listens for 'error' too.)
      const ended = new Promise((resolve) => client.once('end', resolve));
      await withClient(database.url, (admin) => admin.query('select pg_terminate_backend($1)', [pid]));
      await ended;
      await assert.rejects(client.query('select 1'));
    });
  } finally {
    await database.drop();
  }
});
