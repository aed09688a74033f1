/**
 * The listener protocol, version 1 (docs/listener-protocol.md): the endpoints a listener agent calls,
 * with its listener credential (or, for debugging, a workspace API key).
 *
 * The desired state is a long-poll: with If-None-Match equal to the current ETag the request sleeps
 * until the change feed says something of this listener changed (a change on any replica wakes it)
 * and answers the new state at once, or 304 when `wait` runs out. A slow safety re-read covers a
 * notification lost with the feed's connection; without a feed it re-reads every second.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import type { ChangeFeed } from '../db/change-feed.ts';
import { AppError, notFound } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { Uuid, errorResponses } from '../http/schema-helpers.ts';
import { createDesiredStateWaits } from '../service/desired-state-waits.ts';
import type { ListenerProtocolService } from '../service/listener-protocol.ts';
import type { ListenerService } from '../service/listeners.ts';
import type { Database } from '../store/schema.ts';
import {
  DeletionBody,
  DesiredState,
  EndpointReportBody,
  EndpointReportResult,
  HeartbeatBody,
  ReportBody,
  ReportResult,
} from './listener-protocol-schemas.ts';
import { Listener, listenerResponse } from './listeners.ts';
import { needs } from '../http/route-needs.ts';

export interface ListenerProtocolRouteDeps {
  /** For the long-poll waits (src/service/desired-state-waits.ts), which live as long as the app. */
  db: Kysely<Database>;
  protocol: ListenerProtocolService;
  listeners: ListenerService;
  /** Wakes long-polls when something of their listener changes; without it they re-read every second. */
  changes?: ChangeFeed;
}

const MAX_WAIT_SECONDS = 60;
const POLL_WITHOUT_FEED_MS = 1_000;
/** How often a waiting long-poll re-reads without a wake-up, in case a notification was lost. */
const SAFETY_POLL_MS = 10_000;

// ----- schemas of the HTTP requests (the bodies: ./listener-protocol-schemas.ts) ------------------

const Params = Type.Object({ listener_id: Uuid() });

const DesiredStateQuery = Type.Object({
  wait: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: MAX_WAIT_SECONDS,
      default: 0,
      description: 'With If-None-Match: seconds to wait for a change before answering 304.',
    }),
  ),
});

const DesiredStateHeaders = Type.Object({
  'if-none-match': Type.Optional(
    Type.String({ maxLength: 1024, description: 'The ETag of the state the listener has.' }),
  ),
});

/** The security a protocol endpoint documents: the listener credential is sent as a bearer token. */
const security: Record<string, string[]>[] = [{ bearer: [] }, { apiKey: [] }];

/** The entity tags of If-None-Match (weak ones compared by their opaque part, as RFC 9110 says for it). */
function entityTags(header: string | undefined): string[] {
  if (header === undefined) return [];
  return header.split(',').map((tag) => tag.trim().replace(/^W\//, ''));
}

// An API key speaks the protocol only if it is an admin key: the desired state holds the secrets in
// clear, and reports and deletions move revisions and deployments (issue 23, item 2). A listener
// credential is the listener's own and is checked by listenerOf.
const config = { auth: 'listener' as const, admin: true };
const tags = ['listener protocol'];

type RouteApp = Parameters<FastifyPluginAsyncTypebox>[0];
type ListenerOf = (request: FastifyRequest, listenerId: string) => Promise<{ listenerId: string; workspaceId: string }>;

/** Who may speak for the listener in the path, checked at a request's start and again after a long wait. */
function listenerAccess({ protocol, listeners }: ListenerProtocolRouteDeps) {
  /**
   * The listener in the path, when the caller may speak for it; 404 otherwise (never 403). Every
   * protocol request counts as the listener being seen (its state, and whether a delete waits for it).
   */
  async function listenerOf(
    request: FastifyRequest,
    listenerId: string,
  ): Promise<{ listenerId: string; workspaceId: string }> {
    const credential = request.listenerCredential;
    let workspaceId: string;
    if (credential) {
      if (credential.listener_id !== listenerId) throw notFound('Listener', listenerId);
      workspaceId = credential.workspace_id;
    } else {
      workspaceId = workspaceOf(request);
      await listeners.get(workspaceId, listenerId);
    }
    await protocol.seen(listenerId);
    return { listenerId, workspaceId };
  }

  /**
   * Asks again what `listenerOf` established at the start of a long-poll: a credential revoked (or a
   * listener deleted) while the poll waited gets 401 (404), never the state with its decrypted secrets.
   */
  async function stillAllowed(request: FastifyRequest, listenerId: string, workspaceId: string): Promise<void> {
    const credential = request.listenerCredential;
    if (credential) {
      if (!(await protocol.credentialActive(credential.id)))
        throw new AppError('unauthenticated', 'Invalid listener credential.');
    } else {
      await listeners.get(workspaceId, listenerId);
    }
  }

  return { listenerOf, stillAllowed };
}

// ----- routes ------------------------------------------------------------------------------------

export const listenerProtocolRoutes: FastifyPluginAsyncTypebox<ListenerProtocolRouteDeps> = async (app, deps) => {
  const { protocol, listeners } = deps;
  const waits = createDesiredStateWaits({ db: deps.db, changes: deps.changes, logger: app.log });
  const safetyPollMs = waits.hasFeed ? SAFETY_POLL_MS : POLL_WITHOUT_FEED_MS;
  let closing = false;

  // app.close() waits for every open request: waiting long-polls answer at once instead.
  app.addHook('preClose', async () => {
    closing = true;
    waits.wakeAll();
  });
  app.addHook('onClose', async () => waits.stop());

  const { listenerOf, stillAllowed } = listenerAccess(deps);

  app.get(
    '/v2/listeners/:listener_id/desired-state',
    {
      config: needs({
        ...config,
        // A poll that asks to wait is held open: it takes a stream slot (src/http/stream-limits.ts).
        longLived: (request) =>
          request.headers['if-none-match'] !== undefined && ((request.query as { wait?: number }).wait ?? 0) > 0,
      }),
      schema: {
        operationId: 'getDesiredState',
        tags,
        summary: 'Get (or wait for) the desired state of a listener',
        description:
          'Everything the listener must run, with an ETag header. With If-None-Match equal to the current ETag and wait > 0, waits up to wait seconds for a change: 200 with the new state at once on change, 304 at the timeout.',
        security,
        params: Params,
        querystring: DesiredStateQuery,
        headers: DesiredStateHeaders,
        response: {
          200: DesiredState,
          304: {
            description: 'Not modified: the state is still the one of If-None-Match (no body).',
            content: { 'application/json': { schema: Type.Null() } },
          },
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request, reply) => {
      const { listenerId, workspaceId } = await listenerOf(request, request.params.listener_id);
      const known = entityTags(request.headers['if-none-match']);
      const waitMs = (request.query.wait ?? 0) * 1000;
      reply.header('cache-control', 'no-store');

      // Listening starts before the first read, so that a change between the two is not missed.
      const wait = known.length > 0 && waitMs > 0 && !closing ? waits.watch(listenerId) : null;
      const ended = new Promise<void>((resolve) => reply.raw.once('close', resolve));
      let gone = false;
      void ended.then(() => {
        gone = true;
        wait?.close();
      });
      try {
        const deadline = Date.now() + waitMs;
        let current = await protocol.desiredState(listenerId);
        while (wait && known.includes(current.etag) && !gone && !closing) {
          waits.remember(
            listenerId,
            current.state.deployments.map((d) => d.deployment_id),
          );
          const left = deadline - Date.now();
          if (left <= 0) break;
          // Jittered, 75 to 125 % of the period (10 s on average): polls that started together, as every
          // listener's do after a replica restart, would otherwise re-read together forever, in bursts
          // that fill the pool and queue every other request (bench/listener-polls.ts measures it).
          await wait.next(Math.min(left, safetyPollMs * (0.75 + Math.random() / 2)));
          if (gone || closing) break;
          current = await protocol.desiredState(listenerId);
        }
        const unchanged = known.includes(current.etag);
        // A body (secrets) after any read, a 304 after a wait: the credential may have been revoked since.
        if (!unchanged || wait) await stillAllowed(request, listenerId, workspaceId);
        reply.header('etag', current.etag);
        if (unchanged) return reply.status(304).send();
        if (!request.listenerCredential)
          await listeners.recordDesiredStateRead(workspaceId, listenerId, request.caller.keyId);
        return reply.status(200).send(current.state);
      } finally {
        wait?.close();
      }
    },
  );

  registerReportRoutes(app, deps, listenerOf);
};

/** What a listener tells the service: its revisions' statuses, its endpoints, its deletions and conditions. */
function registerReportRoutes(app: RouteApp, { protocol }: ListenerProtocolRouteDeps, listenerOf: ListenerOf): void {
  app.post(
    '/v2/listeners/:listener_id/reports',
    {
      config: needs(config),
      schema: {
        operationId: 'reportRevisionStatus',
        tags,
        summary: 'Report the status of a revision',
        description:
          'Moves the revision through the state table to the reported status (steps in between included, each with its event); DEPLOYED makes it active and the deployment READY. Idempotent: a repeated or stale report answers applied: false and changes nothing.',
        security,
        params: Params,
        body: {
          ...ReportBody,
          examples: [
            {
              revision_id: '7a2c1e4b-0f3d-4c6a-9b8e-2d1f0a9c8b7e',
              status: 'DEPLOY_FAILED',
              failure_reason: 'image_pull_failed',
              message: 'Back-off pulling image "ghcr.io/acme/agent:1.5.0"',
            },
          ],
        },
        response: { 200: ReportResult, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => {
      const { listenerId } = await listenerOf(request, request.params.listener_id);
      return protocol.report(listenerId, request.body);
    },
  );

  app.post(
    '/v2/listeners/:listener_id/endpoint-reports',
    {
      config: needs(config),
      schema: {
        operationId: 'reportEndpointStatus',
        tags,
        summary: 'Report that an endpoint serves its revision (or cannot)',
        description:
          "SERVED sets the endpoint's served_revision_id (event deployment.endpoint_served); FAILED is a deployment.endpoint_failed event. Only while the endpoint still asks for the revision; a repeat answers applied: false. 404 for a deployment that is not this listener's.",
        security,
        params: Params,
        body: EndpointReportBody,
        response: { 200: EndpointReportResult, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => {
      const { listenerId } = await listenerOf(request, request.params.listener_id);
      return protocol.reportEndpoint(listenerId, request.body);
    },
  );

  app.post(
    '/v2/listeners/:listener_id/deletions',
    {
      config: needs(config),
      schema: {
        operationId: 'confirmDeletion',
        tags,
        summary: 'Confirm that a deleted deployment is gone from the cluster',
        description:
          'Removes the deployment (in AWAITING_DELETE) for good. 204 again when it is already gone; 409 when it is not being deleted.',
        security,
        params: Params,
        body: DeletionBody,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 409, 422) },
      },
    },
    async (request, reply) => {
      const { listenerId, workspaceId } = await listenerOf(request, request.params.listener_id);
      await protocol.confirmDeletion(listenerId, workspaceId, request.body.deployment_id);
      return reply.status(204).send(null);
    },
  );

  app.post(
    '/v2/listeners/:listener_id/heartbeat',
    {
      config: needs(config),
      schema: {
        operationId: 'sendListenerHeartbeat',
        tags,
        summary: 'Tell the service the listener agent is alive',
        description:
          'Sets last_seen_at, agent_version and watched_namespaces of the listener, and with `deployments` the condition of each deployment it runs (events on a change); answers the listener.',
        security,
        params: Params,
        body: { ...HeartbeatBody, examples: [{ version: '0.1.0', namespaces: ['agents'] }] },
        response: { 200: Listener, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => {
      const { listenerId, workspaceId } = await listenerOf(request, request.params.listener_id);
      return listenerResponse(await protocol.heartbeat(workspaceId, listenerId, request.body));
    },
  );
}
