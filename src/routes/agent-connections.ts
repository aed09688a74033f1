/**
 * Agent connections, and how a
 * deployed agent uses them: deployment-scoped agent credentials, and the token endpoint those
 * credentials (not API keys) call to get a fresh access token. See docs/oauth.md.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type, type Static } from 'typebox';
import { AppError } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  ShownOnceString,
  Uuid,
  envelope,
  errorResponses,
  pageOf,
} from '../http/schema-helpers.ts';
import type { AgentConnectionService } from '../service/agent-connections.ts';
import type { AgentCredentialService } from '../service/agent-credentials.ts';
import type { ConnectionView } from '../store/agent-connections.ts';
import type { CredentialView, PresentedCredential } from '../store/agent-credentials.ts';
import { AgentId } from './oauth-flow.ts';
import { needs } from '../http/route-needs.ts';

const AgentConnection = Type.Object(
  {
    id: Uuid(),
    agent_id: Type.String(),
    oauth_token_id: Uuid(),
    provider_id: Type.String({ description: "The provider's provider_id (slug)." }),
    provider_account_label: Nullable(Type.String()),
    scopes: Type.Array(Type.String()),
    expires_at: Nullable(DateTime({ description: "When the token's current access token expires." })),
    created_by: Type.String({ description: 'The id of the API key that made the connection.' }),
    created_at: DateTime(),
  },
  { title: 'AgentConnection', description: 'An agent connected to an OAuth token.' },
);

const AgentCredential = Type.Object(
  {
    id: Uuid(),
    deployment_id: Uuid(),
    name: Type.String(),
    agent_ids: Nullable(
      Type.Array(Type.String(), {
        description:
          "The agents it may fetch tokens for. null (only the data plane's runtime credential): " +
          "the deployment's own agents, whose agent_id is the deployment's name or starts with " +
          'it and a slash.',
      }),
    ),
    credential_prefix: Type.String({ description: 'The first characters of the credential, to tell them apart.' }),
    created_by: Type.String(),
    created_at: DateTime(),
    last_used_at: Nullable(DateTime()),
    revoked_at: Nullable(DateTime()),
  },
  { title: 'AgentCredential' },
);
const CreatedAgentCredential = Type.Object(
  { ...AgentCredential.properties, credential: ShownOnceString({ description: 'Shown only in this response.' }) },
  { title: 'AgentCredentialCreated' },
);

const AgentToken = Type.Object(
  {
    access_token: Type.String(),
    token_type: Type.String(),
    expires_at: Nullable(DateTime()),
    scopes: Type.Array(Type.String()),
    oauth_token_id: Uuid(),
    connection_id: Uuid(),
    provider_id: Type.String(),
    provider_account_label: Nullable(Type.String()),
  },
  {
    title: 'AgentToken',
    description: 'A usable access token; refreshed first when it was expired or about to expire.',
  },
);

const AgentParams = Type.Object({ agent_id: AgentId });
const ConnectionParams = Type.Object({ agent_id: AgentId, connection_id: Uuid() });
const DeploymentParams = Type.Object({ deployment_id: Uuid() });
const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());

function connectionResponse(row: ConnectionView): Static<typeof AgentConnection> {
  return {
    id: row.id,
    agent_id: row.agent_id,
    oauth_token_id: row.oauth_token_id,
    provider_id: row.provider_id,
    provider_account_label: row.provider_account_label,
    scopes: row.scopes,
    expires_at: iso(row.expires_at),
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
  };
}

function credentialResponse(row: CredentialView): Static<typeof AgentCredential> {
  return {
    id: row.id,
    deployment_id: row.deployment_id,
    name: row.name,
    agent_ids: row.agent_ids,
    credential_prefix: row.credential_prefix,
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
    last_used_at: iso(row.last_used_at),
    revoked_at: iso(row.revoked_at),
  };
}

function presentedCredential(request: FastifyRequest): string {
  const match = /^Bearer\s+(\S{1,512})\s*$/i.exec(request.headers.authorization ?? '');
  if (!match)
    throw new AppError('unauthenticated', 'Missing agent credential: send Authorization: Bearer <agent credential>.');
  return match[1]!;
}

export interface AgentConnectionRouteDeps {
  connections: AgentConnectionService;
  credentials: AgentCredentialService;
}

/** An agent's connections to tokens: connect, list, disconnect. */
const connectionRoutes: FastifyPluginAsyncTypebox<AgentConnectionRouteDeps> = async (app, { connections }) => {
  const tags = ['oauth'];
  // An agent credential fetches the access tokens of its agents' connections in clear, and a connection
  // decides which token of the workspace an agent reaches (any person's): both are managed with admin
  // keys, like listener credentials, so that a member key cannot read another person's token through a
  // deployment. Members read them, and connect an agent to their own token through
  // POST /v2/auth/authenticate with agent_id (issue 23, item 4; docs/api.md, "Who may do what").

  app.post(
    '/v2/auth/agents/:agent_id/connections',
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createAgentConnection',
        tags,
        summary: 'Connect an agent to an OAuth token',
        params: AgentParams,
        body: Type.Object({ oauth_token_id: Uuid() }, { title: 'AgentConnectionCreate' }),
        response: { 201: AgentConnection, ...errorResponses(400, 401, 403, 409, 422) },
      },
    },
    async (request, reply) => {
      const view = await connections.connect(
        workspaceOf(request),
        request.params.agent_id,
        request.body.oauth_token_id,
        request.caller.keyId,
      );
      return reply.status(201).send(connectionResponse(view));
    },
  );

  app.get(
    '/v2/auth/agents/:agent_id/connections',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listAgentConnections',
        tags,
        summary: "List an agent's connections",
        description: 'An agent without connections has an empty list.',
        params: AgentParams,
        response: {
          200: Type.Object({ data: Type.Array(AgentConnection) }, { title: 'AgentConnectionList' }),
          ...errorResponses(401, 403, 422),
        },
      },
    },
    async (request) => ({
      data: (await connections.list(workspaceOf(request), request.params.agent_id)).map(connectionResponse),
    }),
  );

  app.delete(
    '/v2/auth/agents/:agent_id/connections/:connection_id',
    {
      config: needs({ auth: 'workspace', admin: true, ifMatch: 'only-star' }),
      schema: {
        operationId: 'deleteAgentConnection',
        tags,
        summary: 'Delete an agent connection (the token stays)',
        params: ConnectionParams,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await connections.remove(
        workspaceOf(request),
        request.params.agent_id,
        request.params.connection_id,
        request.caller.keyId,
      );
      return reply.status(204).send(null);
    },
  );
};

/** A deployment's agent credentials: create, list, delete. */
const agentCredentialRoutes: FastifyPluginAsyncTypebox<AgentConnectionRouteDeps> = async (app, { credentials }) => {
  const tags = ['oauth'];
  app.post(
    '/v2/deployments/:deployment_id/agent-credentials',
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createAgentCredential',
        tags,
        summary: 'Mint an agent credential for a deployment',
        description:
          'The credential (shown once) lets the deployed agent call ' +
          'POST /v2/auth/agents/{agent_id}/connections/{connection_id}/token for the connections of the agents ' +
          'in agent_ids, and no others; it dies with the deployment.',
        params: DeploymentParams,
        body: Type.Object(
          {
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
            // Required: least privilege. A credential for "every agent of the workspace" would hand any
            // deployment every token of the workspace.
            agent_ids: Type.Array(AgentId, {
              minItems: 1,
              maxItems: 100,
              uniqueItems: true,
              description: 'The agents whose connections it may fetch tokens for.',
            }),
          },
          { title: 'AgentCredentialCreate' },
        ),
        response: { 201: CreatedAgentCredential, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      const { row, credential } = await credentials.mint(
        workspaceOf(request),
        request.params.deployment_id,
        request.body,
        request.caller.keyId,
      );
      return reply
        .status(201)
        .header('cache-control', 'no-store')
        .send({ ...credentialResponse(row), credential });
    },
  );

  app.get(
    '/v2/deployments/:deployment_id/agent-credentials',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listAgentCredentials',
        tags,
        summary: "List a deployment's agent credentials (never the credentials)",
        params: DeploymentParams,
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(AgentCredential, "A page of the deployment's agent credentials, newest first."),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const page = pageOf(request.query);
      const rows = await credentials.list(workspaceOf(request), request.params.deployment_id, page);
      return envelope(rows.map(credentialResponse), page.offset);
    },
  );

  app.delete(
    '/v2/deployments/:deployment_id/agent-credentials/:credential_id',
    {
      config: needs({ auth: 'workspace', admin: true, ifMatch: 'only-star' }),
      schema: {
        operationId: 'revokeAgentCredential',
        tags,
        summary: 'Revoke an agent credential',
        params: Type.Object({ deployment_id: Uuid(), credential_id: Uuid() }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await credentials.revoke(
        workspaceOf(request),
        request.params.deployment_id,
        request.params.credential_id,
        request.caller.keyId,
      );
      return reply.status(204).send(null);
    },
  );
};

/** The access token of an agent's connection, fetched with an agent credential. */
const agentTokenRoutes: FastifyPluginAsyncTypebox<AgentConnectionRouteDeps> = async (
  app,
  { connections, credentials },
) => {
  const tags = ['oauth'];
  /** The agent credential of a token request, authorized by its route's onRequest. */
  const agentCredentials = new WeakMap<FastifyRequest, PresentedCredential>();
  app.post(
    '/v2/auth/agents/:agent_id/connections/:connection_id/token',
    {
      // Authenticated by an agent credential, checked here, never by an API key: on request, before the
      // body and the parameters are read, so that a request without a usable credential is 401 (and one
      // for another agent 403) whatever else is wrong with it, as on every other operation.
      config: needs({ auth: 'none' }),
      onRequest: async (request) => {
        const { agent_id: agentId } = request.params as { agent_id: string };
        agentCredentials.set(request, await credentials.authorize(presentedCredential(request), agentId));
      },
      schema: {
        operationId: 'getAgentAccessToken',
        tags,
        summary: 'Get a fresh access token for a connection (deployed agents)',
        description:
          'Authorization: Bearer <agent credential>. Refreshes the token first when it expired ' +
          'or expires within a minute. 409 when the token needs a new authorization.',
        security: [{ bearer: [] }],
        params: ConnectionParams,
        response: { 200: AgentToken, ...errorResponses(401, 403, 404, 409, 422, 502, 503) },
      },
    },
    async (request, reply) => {
      const { token, connection } = await connections.accessToken(
        agentCredentials.get(request)!,
        request.params.agent_id,
        request.params.connection_id,
      );
      return reply.header('cache-control', 'no-store').send({
        access_token: token.accessToken,
        token_type: token.tokenType,
        expires_at: iso(token.expiresAt),
        scopes: token.scopes,
        oauth_token_id: connection.oauth_token_id,
        connection_id: connection.id,
        provider_id: connection.provider_id,
        provider_account_label: connection.provider_account_label,
      });
    },
  );
};

export const agentConnectionRoutes: FastifyPluginAsyncTypebox<AgentConnectionRouteDeps> = async (app, opts) => {
  await connectionRoutes(app, opts);
  await agentCredentialRoutes(app, opts);
  await agentTokenRoutes(app, opts);
};
