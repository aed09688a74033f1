/**
 * Protocol credentials: what callers of a deployment's MCP and A2A endpoints present when the deployment
 * requires one, and the check its server makes with them (docs/langgraph.md, "Who may call MCP and A2A").
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type, type Static } from 'typebox';
import { AppError } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { needs } from '../http/route-needs.ts';
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
import type { ProtocolCredentialService } from '../service/protocol-credentials.ts';
import type { ProtocolCredentialView } from '../store/protocol-credentials.ts';

const ProtocolCredential = Type.Object(
  {
    id: Uuid(),
    deployment_id: Uuid(),
    name: Type.String(),
    credential_prefix: Type.String({ description: 'The first characters of the credential, to tell them apart.' }),
    created_by: Type.String(),
    created_at: DateTime(),
    last_used_at: Nullable(DateTime()),
    revoked_at: Nullable(DateTime()),
  },
  {
    title: 'ProtocolCredential',
    description:
      "A credential for a deployment's MCP (/mcp) and A2A (/a2a/{assistant_id}, the agent card) endpoints, " +
      'sent as Authorization: Bearer slwp_... when the deployment requires one (SLIPWAY_PROTOCOLS_AUTH=credential).',
  },
);
const CreatedProtocolCredential = Type.Object(
  {
    ...ProtocolCredential.properties,
    credential: ShownOnceString({ description: 'slwp_...: shown only in this response.' }),
  },
  { title: 'ProtocolCredentialCreated' },
);
const DeploymentParams = Type.Object({ deployment_id: Uuid() });
const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());

function credentialResponse(row: ProtocolCredentialView): Static<typeof ProtocolCredential> {
  return {
    id: row.id,
    deployment_id: row.deployment_id,
    name: row.name,
    credential_prefix: row.credential_prefix,
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
    last_used_at: iso(row.last_used_at),
    revoked_at: iso(row.revoked_at),
  };
}

function agentCredentialOf(request: FastifyRequest): string {
  const match = /^Bearer\s+(\S{1,512})\s*$/i.exec(request.headers.authorization ?? '');
  if (!match)
    throw new AppError('unauthenticated', 'Missing agent credential: send Authorization: Bearer <agent credential>.');
  return match[1]!;
}

export interface ProtocolCredentialRouteDeps {
  credentials: ProtocolCredentialService;
}

export const protocolCredentialRoutes: FastifyPluginAsyncTypebox<ProtocolCredentialRouteDeps> = async (
  app,
  { credentials },
) => {
  const tags = ['deployments'];
  /** The deployment whose server asks (by its agent credential), found by the verify route's onRequest. */
  const askers = new WeakMap<FastifyRequest, string>();
  // Admin keys mint and revoke them, as agent and listener credentials: a protocol credential runs the
  // deployment's graphs as whoever holds it.

  app.post(
    '/v2/deployments/:deployment_id/protocol-credentials',
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createProtocolCredential',
        tags,
        summary: "Mint a credential for a deployment's MCP and A2A endpoints",
        description:
          'The credential (shown once) opens /mcp, /a2a/{assistant_id} and the agent card of this deployment ' +
          'when it requires one (SLIPWAY_PROTOCOLS_AUTH=credential), and nothing else: not the API, not ' +
          'another deployment. It dies with the deployment.',
        params: DeploymentParams,
        body: Type.Object(
          { name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })) },
          { title: 'ProtocolCredentialCreate' },
        ),
        response: { 201: CreatedProtocolCredential, ...errorResponses(401, 403, 404, 422) },
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
    '/v2/deployments/:deployment_id/protocol-credentials',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listProtocolCredentials',
        tags,
        summary: "List a deployment's protocol credentials (never the credentials)",
        params: DeploymentParams,
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(ProtocolCredential, "A page of the deployment's protocol credentials, newest first."),
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
    '/v2/deployments/:deployment_id/protocol-credentials/:credential_id',
    {
      config: needs({ auth: 'workspace', admin: true, ifMatch: 'only-star' }),
      schema: {
        operationId: 'revokeProtocolCredential',
        tags,
        summary: 'Revoke a protocol credential',
        description: 'Refused by the deployment within 10 seconds (its server keeps a check that long).',
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

  app.post(
    '/v2/auth/protocol-credentials/verify',
    {
      // Called by a deployment's server (runtime/langgraph/protocol-auth.mjs) with its own agent
      // credential, never an API key: checked on request, before the body is read.
      config: needs({ auth: 'none' }),
      onRequest: async (request) => {
        askers.set(request, await credentials.deploymentOf(agentCredentialOf(request)));
      },
      schema: {
        operationId: 'verifyProtocolCredential',
        tags,
        summary: "Check a caller's protocol credential (deployed servers)",
        description:
          'Authorization: Bearer <agent credential of the deployment>. valid is true only for an unrevoked ' +
          "protocol credential of that credential's own deployment.",
        security: [{ bearer: [] }],
        body: Type.Object(
          { credential: Type.String({ minLength: 1, maxLength: 512 }) },
          { title: 'ProtocolCredentialCheck' },
        ),
        response: {
          200: Type.Object(
            {
              valid: Type.Boolean(),
              credential_id: Nullable(Uuid({ description: 'The protocol credential, when valid.' })),
            },
            { title: 'ProtocolCredentialVerdict' },
          ),
          ...errorResponses(401, 422),
        },
      },
    },
    async (request, reply) => {
      const found = await credentials.verify(askers.get(request)!, request.body.credential);
      return reply
        .header('cache-control', 'no-store')
        .send({ valid: found !== null, credential_id: found?.id ?? null });
    },
  );
};
