/**
 * What the listener protocol tests share: the test app (called through inject(), as one replica), a
 * second app on the same database with a real change feed, listening on a port (another replica, for
 * long-polls over real HTTP), and small helpers to make listeners, credentials and deployments.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { FastifyInstance } from 'fastify';
import {
  client,
  createTestApp,
  registerListener,
  startReplica,
  type RegisteredListener,
  type TestApp,
  type TestAppOptions,
} from '../support/harness.ts';

export interface ProtocolFixture {
  t: TestApp;
  /** The workspace's admin API key, through inject(). */
  api: ReturnType<typeof client>;
  /** The replica with the change feed, on a real port. */
  live: FastifyInstance;
  liveUrl: string;
  close(): Promise<void>;
}

/** `options.now`: the test app's clock (test/support/clock.ts), for a test that moves time; the replica keeps the real one. */
export async function createProtocolFixture(options: Pick<TestAppOptions, 'now'> = {}): Promise<ProtocolFixture> {
  const t = await createTestApp({}, options);
  try {
    const replica = await startReplica(t);
    return {
      t,
      api: client(t.app),
      live: replica.app,
      liveUrl: replica.url,
      async close() {
        await replica.close();
        await t.close();
      },
    };
  } catch (error) {
    await t.close();
    throw error;
  }
}

let made = 0;
const unique = (prefix: string) => `${prefix}-${process.pid}-${++made}`;

export type Listener = RegisteredListener;

/** A listener with one credential. */
export function newListener(api: ProtocolFixture['api'], namespaces: string[] = ['agents']): Promise<Listener> {
  return registerListener(api.post, unique('cluster'), namespaces);
}

export interface Deployment {
  id: string;
  name: string;
  revisionId: string;
}

/** An external_container deployment on the listener; its first revision is QUEUED. */
export async function newDeployment(
  api: ProtocolFixture['api'],
  listenerId: string,
  extra: Record<string, unknown> = {},
): Promise<Deployment> {
  const name = unique('agent');
  const res = await api.post('/v2/deployments', {
    name,
    source: 'external_container',
    source_config: { listener_id: listenerId },
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1.0.0' },
    ...extra,
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return { id: res.body.id, name, revisionId: res.body.latest_revision_id };
}

/** The listener's agent, speaking the protocol with its credential through inject(). */
export function agent(f: ProtocolFixture, listener: Listener) {
  const as = client(f.t.app, null);
  const auth = { authorization: `Bearer ${listener.credential}` };
  return {
    desiredState: (query = '', headers: Record<string, string> = {}) =>
      as.get(`/v2/listeners/${listener.id}/desired-state${query}`, { ...auth, ...headers }),
    report: (body: Record<string, unknown>) => as.post(`/v2/listeners/${listener.id}/reports`, body, auth),
    confirmDeletion: (deploymentId: string) =>
      as.post(`/v2/listeners/${listener.id}/deletions`, { deployment_id: deploymentId }, auth),
    heartbeat: (body: Record<string, unknown>) => as.post(`/v2/listeners/${listener.id}/heartbeat`, body, auth),
  };
}

/**
 * A desired-state request over real HTTP to the live replica (or `url`), on a connection of its own
 * that closes with it: a pooled keep-alive connection would hold the server's close open.
 */
export async function fetchDesiredState(
  f: ProtocolFixture,
  listener: Listener,
  options: { wait?: number; etag?: string; signal?: AbortSignal; url?: string } = {},
) {
  const url = new URL(
    `${options.url ?? f.liveUrl}/v2/listeners/${listener.id}/desired-state?wait=${options.wait ?? 0}`,
  );
  const { status, headers, text } = await new Promise<{
    status: number;
    headers: http.IncomingHttpHeaders;
    text: string;
  }>((resolve, reject) => {
    const request = http.get(
      url,
      {
        agent: false,
        signal: options.signal,
        headers: {
          authorization: `Bearer ${listener.credential}`,
          ...(options.etag ? { 'if-none-match': options.etag } : {}),
        },
      },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, text: body }));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
  });
  const etag = headers.etag ?? null;
  return { status, etag, body: text === '' ? undefined : JSON.parse(text) };
}

/** The deployment's events, oldest first, as `type:from->to`. */
export async function eventTrail(f: ProtocolFixture, deploymentId: string): Promise<string[]> {
  const rows = await f.t.database.db
    .selectFrom('events')
    .select(['type', 'from_status', 'to_status'])
    .where('deployment_id', '=', deploymentId)
    .orderBy('id')
    .execute();
  return rows.map((e) => `${e.type}:${e.from_status ?? ''}->${e.to_status ?? ''}`);
}
