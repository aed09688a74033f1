/**
 * Administration on a PostgreSQL server: a one-off client for a few statements (creating or dropping
 * a database, a role), and the connection string of another database on the same server.
 */
import pg from 'pg';

export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = quietClient(new pg.Client({ connectionString: url }));
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** The same server and credentials, another database. */
export function databaseUrl(url: string, database: string): string {
  const out = new URL(url);
  out.pathname = `/${database}`;
  return out.toString();
}

/**
 * A client whose lost connection does not end the process. pg emits 'error' when the server ends a
 * connection between queries (a database dropped with FORCE, pg_terminate_backend, a server restart), and
 * an 'error' with no listener is an uncaught exception. With this listener the loss shows where it
 * belongs: the client's next query, or its end, fails.
 */
export function quietClient(client: pg.Client): pg.Client {
  client.on('error', () => undefined);
  return client;
}
