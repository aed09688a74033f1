/**
 * Listeners: clusters registered to run external_container deployments, and the credentials their
 * agents use for the listener protocol (the protocol itself: src/routes/listener-protocol.ts).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type, type Static } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  ShownOnceString,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import type { ListenerService } from '../service/listeners.ts';
import type { ListenerCredentialView } from '../store/listener-credentials.ts';
import type { Db } from '../store/schema.ts';
import { LISTENER_STALE_AFTER_SECONDS, LISTENER_STATES, type ListenerView } from '../store/listeners.ts';
import { needs } from '../http/route-needs.ts';

const NAMESPACE = Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', maxLength: 63 });
const ComputeConfig = Type.Object(
  {
    k8s_namespaces: Type.Optional(
      Nullable(
        Type.Array(NAMESPACE, {
          minItems: 1,
          maxItems: 100,
          uniqueItems: true,
          description: 'Namespaces the listener serves; default ["default"].',
        }),
      ),
    ),
  },
  { title: 'ComputeConfigInput' },
);

export const Listener = Type.Object(
  {
    compute_type: Type.String({ enum: ['k8s'] }),
    compute_id: Type.String(),
    compute_config: Type.Object({ k8s_namespaces: Type.Array(Type.String()) }),
    id: Uuid(),
    created_at: DateTime(),
    updated_at: DateTime(),
    version: Nullable(Type.String()),
    last_seen_at: Nullable(
      DateTime({ description: 'The last heartbeat or desired-state request of its agent; null: never.' }),
    ),
    state: StringEnum(LISTENER_STATES, {
      description: `never_seen: no agent has called yet; connected: seen in the last ${LISTENER_STALE_AFTER_SECONDS} s; stale: seen, but not since.`,
    }),
    watched_namespaces: Nullable(
      Type.Array(Type.String(), {
        description:
          'The namespaces the agent said in its last heartbeat that it watches; null before the first heartbeat.',
      }),
    ),
    namespaces_not_watched: Nullable(
      Type.Array(Type.String(), {
        description:
          'Namespaces of compute_config that the agent does not watch (deployments there will not run); null before the first heartbeat.',
      }),
    ),
    agent_version: Nullable(Type.String({ description: "The agent's version, from its last heartbeat." })),
    agent_message: Nullable(Type.String({ description: 'The message of the last heartbeat, if it had one.' })),
  },
  { title: 'Listener', description: 'A listener.' },
);

const CreateBody = Type.Object(
  {
    compute_type: Type.String({ enum: ['k8s'], description: 'Only k8s.' }),
    compute_id: Type.String({
      minLength: 1,
      maxLength: 253,
      pattern: '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$',
      description: 'Assigned by the user, for example the cluster name; unique in the workspace.',
    }),
    compute_config: Type.Optional(Nullable(ComputeConfig)),
    version: Type.Optional(Nullable(Type.String({ maxLength: 128 }))),
  },
  { title: 'ListenerCreate' },
);

const PatchBody = Type.Object(
  {
    version: Type.Optional(Nullable(Type.String({ maxLength: 128 }))),
    compute_config: Type.Optional(Nullable(ComputeConfig)),
    compute_type: Type.Optional(Type.Unknown({ description: 'Cannot change; the current value is accepted.' })),
    compute_id: Type.Optional(Type.Unknown({ description: 'Cannot change; the current value is accepted.' })),
  },
  { title: 'ListenerPatch' },
);

const Params = Type.Object({ listener_id: Uuid() });

export function listenerResponse(row: ListenerView): Static<typeof Listener> {
  const watched = row.watched_namespaces;
  return {
    compute_type: row.compute_type,
    compute_id: row.compute_id,
    compute_config: { k8s_namespaces: row.compute_config.k8s_namespaces },
    id: row.id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    version: row.version,
    last_seen_at: row.last_seen_at === null ? null : row.last_seen_at.toISOString(),
    state: row.state,
    watched_namespaces: watched,
    namespaces_not_watched:
      watched === null ? null : row.compute_config.k8s_namespaces.filter((n) => !watched.includes(n)),
    agent_version: row.agent_version,
    agent_message: row.agent_message,
  };
}

const ListenerCredential = Type.Object(
  {
    id: Uuid(),
    listener_id: Uuid(),
    credential_prefix: Type.String({ description: 'The first characters of the credential, to tell them apart.' }),
    created_by: Type.String({ description: 'The id of the API key that made it.' }),
    created_at: DateTime(),
    last_used_at: Nullable(DateTime({ description: 'When its agent last called with it (to the minute).' })),
    revoked_at: Nullable(DateTime()),
  },
  { title: 'ListenerCredential', description: 'A listener credential, without the credential itself.' },
);
const CreatedListenerCredential = Type.Object(
  {
    ...ListenerCredential.properties,
    credential: ShownOnceString({
      description: 'slwl_...: send as Authorization: Bearer. Shown only in this response.',
    }),
  },
  { title: 'ListenerCredentialCreated', description: 'A new listener credential, shown once.' },
);
const CredentialParams = Type.Object({ listener_id: Uuid(), credential_id: Uuid() });

const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());
const credentialResponse = (row: ListenerCredentialView): Static<typeof ListenerCredential> => ({
  ...row,
  created_at: row.created_at.toISOString(),
  last_used_at: iso(row.last_used_at),
  revoked_at: iso(row.revoked_at),
});

export const listenerRoutes: FastifyPluginAsyncTypebox<{ listeners: ListenerService }> = async (app, { listeners }) => {
  // A listener decides where a workspace's deployments run and with which secrets, and its credentials
  // read those secrets in clear: creating, changing and deleting listeners and managing their
  // credentials need an admin key, like code hosts. Members read them (issue 23, item 3).
  /** If-Match is checked against this: the listener as its GET shows it, read in the write's transaction. */
  const current = async (request: FastifyRequest, tx: Db) =>
    listenerResponse(
      await listeners.get(workspaceOf(request), (request.params as { listener_id: string }).listener_id, tx),
    );

  app.post(
    '/v2/listeners',
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createListener',
        tags: ['listeners'],
        summary: 'Create a listener',
        body: {
          ...CreateBody,
          examples: [
            {
              compute_type: 'k8s',
              compute_id: 'prod-eu-1',
              compute_config: { k8s_namespaces: ['agents'] },
              version: '0.1.0',
            },
          ],
        },
        response: { 201: Listener, ...errorResponses(400, 401, 403, 409, 422) },
      },
    },
    async (request, reply) => {
      const row = await listeners.create(workspaceOf(request), request.body);
      return reply.status(201).send(listenerResponse(row));
    },
  );

  app.get(
    '/v2/listeners',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listListeners',
        tags: ['listeners'],
        summary: 'List listeners',
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(Listener, 'A page of listeners, newest first.'),
          ...errorResponses(401, 403, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await listeners.list(workspaceOf(request), { limit, offset });
      return envelope(rows.map(listenerResponse), offset);
    },
  );

  app.get(
    '/v2/listeners/:listener_id',
    {
      config: needs({ auth: 'workspace', etag: true }),
      schema: {
        operationId: 'getListener',
        tags: ['listeners'],
        summary: 'Get a listener',
        params: Params,
        response: { 200: Listener, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => listenerResponse(await listeners.get(workspaceOf(request), request.params.listener_id)),
  );

  app.patch(
    '/v2/listeners/:listener_id',
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true, ifMatch: current }),
      schema: {
        operationId: 'patchListener',
        tags: ['listeners'],
        summary: 'Patch a listener',
        description:
          'Changes version and namespaces; compute_type and compute_id cannot change. A namespace still used by a deployment cannot be removed.',
        params: Params,
        body: PatchBody,
        response: { 200: Listener, ...errorResponses(400, 401, 403, 404, 409, 422) },
      },
    },
    async (request) =>
      listenerResponse(
        await listeners.patch(workspaceOf(request), request.params.listener_id, request.body, {
          precondition: request.precondition,
        }),
      ),
  );

  app.delete(
    '/v2/listeners/:listener_id',
    {
      config: needs({ auth: 'workspace', admin: true, ifMatch: current }),
      schema: {
        operationId: 'deleteListener',
        tags: ['listeners'],
        summary: 'Delete a listener',
        description: '409 while deployments use it.',
        params: Params,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 409, 422) },
      },
    },
    async (request, reply) => {
      await listeners.remove(workspaceOf(request), request.params.listener_id, { precondition: request.precondition });
      return reply.status(204).send(null);
    },
  );

  registerCredentialRoutes(app, listeners);
};

type RouteApp = Parameters<FastifyPluginAsyncTypebox>[0];

/** The credentials of a listener's agent (docs/listener-protocol.md, "Authentication"). */
function registerCredentialRoutes(app: RouteApp, listeners: ListenerService): void {
  app.post(
    '/v2/listeners/:listener_id/credentials',
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createListenerCredential',
        tags: ['listeners'],
        summary: 'Create a listener credential',
        description:
          'The credential (slwl_...) is shown once. It opens the listener protocol endpoints of this listener and nothing else.',
        params: Params,
        response: { 201: CreatedListenerCredential, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      const { row, credential } = await listeners.createCredential(
        workspaceOf(request),
        request.params.listener_id,
        request.caller.keyId,
      );
      return reply
        .status(201)
        .header('cache-control', 'no-store')
        .send({ ...credentialResponse(row), credential });
    },
  );

  app.get(
    '/v2/listeners/:listener_id/credentials',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listListenerCredentials',
        tags: ['listeners'],
        summary: "List a listener's credentials",
        description: 'Never the credentials themselves; revoked ones too, newest first.',
        params: Params,
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(ListenerCredential, 'A page of listener credentials, newest first.'),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await listeners.listCredentials(workspaceOf(request), request.params.listener_id, { limit, offset });
      return envelope(rows.map(credentialResponse), offset);
    },
  );

  app.delete(
    '/v2/listeners/:listener_id/credentials/:credential_id',
    {
      config: needs({ auth: 'workspace', admin: true, ifMatch: 'only-star' }),
      schema: {
        operationId: 'revokeListenerCredential',
        tags: ['listeners'],
        summary: 'Revoke a listener credential',
        description:
          'It stops working at once (a desired-state long-poll it started ends at its timeout). 404 for an unknown or already revoked one.',
        params: CredentialParams,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await listeners.revokeCredential(
        workspaceOf(request),
        request.params.listener_id,
        request.params.credential_id,
        request.caller.keyId,
      );
      return reply.status(204).send(null);
    },
  );
}
