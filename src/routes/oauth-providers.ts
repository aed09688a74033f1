/**
 * OAuth providers: identity providers of
 * the caller's organization. `{provider_id}` in a path is the provider's slug or its id. The response
 * is exactly the interface's resource; `client_secret` is write-only.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type, type Static } from 'typebox';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  SecretString,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import { CODE_CHALLENGE_METHODS, TOKEN_ENDPOINT_AUTH_METHODS } from '../oauth/oauth-provider-config.ts';
import type { OAuthProviderService, ProviderActor } from '../service/oauth-providers.ts';
import type { Db, OAuthProviderRow } from '../store/schema.ts';
import { needs } from '../http/route-needs.ts';

const SLUG = {
  minLength: 1,
  maxLength: 64,
  pattern: '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$',
  description: 'Lowercase letters, digits, - and _; unique in the organization; part of the callback URL.',
};
const URL_FIELD = (description: string) => Type.String({ minLength: 1, maxLength: 2048, description });
/** RFC 6749 §3.3 scope-token. */
const Scope = Type.String({ minLength: 1, maxLength: 256, pattern: '^[\\x21\\x23-\\x5b\\x5d-\\x7e]+$' });

export const OAuthProvider = Type.Object(
  {
    id: Uuid(),
    organization_id: Uuid(),
    provider_id: Type.String(),
    name: Type.String(),
    client_id: Type.String(),
    auth_url: Type.String(),
    token_url: Type.String(),
    uses_pkce: Type.Boolean(),
    code_challenge_method: Type.String(),
    created_at: DateTime(),
    updated_at: DateTime(),
    provider_type: Nullable(Type.String({ description: '"mcp": the tokens are for mcp_server_url only.' })),
    mcp_server_url: Nullable(Type.String({ description: 'The MCP server the tokens are for (RFC 8707 resource).' })),
    token_endpoint_auth_method: Type.String(),
    is_dynamic_client: Type.Boolean({
      description: "Whether Slipway registered the client itself (RFC 7591) at the MCP server's authorization server.",
    }),
  },
  { title: 'OAuthProvider', description: 'An OAuth provider. client_secret is write-only and never returned.' },
);

/** Settings beyond the interface's update body, accepted by create and update alike. */
const ExtraSettings = {
  revocation_url: Type.Optional(
    Nullable(URL_FIELD('RFC 7009 revocation endpoint; deleting a token revokes it there.')),
  ),
  userinfo_url: Type.Optional(
    Nullable(URL_FIELD('OpenID Connect userinfo endpoint, asked for the account label when no ID token names it.')),
  ),
  issuer: Type.Optional(Nullable(URL_FIELD('Issuer identifier, checked against the iss of responses and ID tokens.'))),
  provider_type: Type.Optional(
    Nullable(
      Type.String({
        maxLength: 64,
        description:
          '"mcp": the tokens are for the MCP server at mcp_server_url only (sent as resource, RFC 8707). On ' +
          'create, "mcp" with mcp_server_url and without auth_url/token_url discovers them (protected-resource ' +
          'metadata, RFC 9728, then authorization-server metadata, RFC 8414, or OpenID discovery), and without ' +
          'client_id registers a client dynamically (RFC 7591; is_dynamic_client true, its secret sealed). ' +
          'Other values are stored as they are.',
      }),
    ),
  ),
  mcp_server_url: Type.Optional(
    Nullable(
      URL_FIELD(
        'The MCP server the tokens are for (with provider_type "mcp"). Discovery refuses non-https and ' +
          'loopback, private or link-local addresses unless SLIPWAY_ALLOW_INSECURE_OAUTH=1.',
      ),
    ),
  ),
  token_endpoint_auth_method: Type.Optional(
    StringEnum(TOKEN_ENDPOINT_AUTH_METHODS, { description: 'Default client_secret_post.' }),
  ),
  scopes: Type.Optional(
    Nullable(Type.Array(Scope, { maxItems: 100, description: 'Scopes requested when an authentication names none.' })),
  ),
};

const CreateBody = Type.Object(
  {
    provider_id: Type.String(SLUG),
    name: Type.String({ minLength: 1, maxLength: 128 }),
    client_id: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 512,
        description: 'Required, except with provider_type "mcp" (a client is then registered dynamically).',
      }),
    ),
    client_secret: Type.Optional(
      Nullable(SecretString({ minLength: 1, maxLength: 4096, description: 'Write-only; encrypted at rest.' })),
    ),
    auth_url: Type.Optional(
      URL_FIELD('Authorization endpoint (https). Required, except with provider_type "mcp" (discovered).'),
    ),
    token_url: Type.Optional(
      URL_FIELD('Token endpoint (https). Required, except with provider_type "mcp" (discovered).'),
    ),
    uses_pkce: Type.Optional(
      Type.Boolean({ description: 'Default true. A public client (token_endpoint_auth_method none) must use PKCE.' }),
    ),
    code_challenge_method: Type.Optional(StringEnum(CODE_CHALLENGE_METHODS, { description: 'Default S256.' })),
    ...ExtraSettings,
  },
  { title: 'OAuthProviderCreate' },
);

const UpdateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    client_id: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
    client_secret: Type.Optional(
      Nullable(SecretString({ minLength: 1, maxLength: 4096, description: 'Write-only; null removes it.' })),
    ),
    auth_url: Type.Optional(URL_FIELD('Authorization endpoint (https).')),
    token_url: Type.Optional(URL_FIELD('Token endpoint (https).')),
    uses_pkce: Type.Optional(
      Type.Boolean({ description: 'A public client (token_endpoint_auth_method none) must use PKCE.' }),
    ),
    code_challenge_method: Type.Optional(StringEnum(CODE_CHALLENGE_METHODS)),
    provider_id: Type.Optional(Type.String({ description: 'Cannot change; the current value is accepted.' })),
    ...ExtraSettings,
  },
  { title: 'OAuthProviderUpdate' },
);

const Params = Type.Object({
  provider_id: Type.String({ minLength: 1, maxLength: 64, description: "The provider's provider_id (slug) or id." }),
});

export function providerResponse(row: OAuthProviderRow): Static<typeof OAuthProvider> {
  return {
    id: row.id,
    organization_id: row.organization_id,
    provider_id: row.provider_id,
    name: row.name,
    client_id: row.client_id,
    auth_url: row.auth_url,
    token_url: row.token_url,
    uses_pkce: row.uses_pkce,
    code_challenge_method: row.code_challenge_method,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    provider_type: row.provider_type,
    mcp_server_url: row.mcp_server_url,
    token_endpoint_auth_method: row.token_endpoint_auth_method,
    is_dynamic_client: row.is_dynamic_client,
  };
}

export const oauthProviderRoutes: FastifyPluginAsyncTypebox<{ providers: OAuthProviderService }> = async (
  app,
  { providers },
) => {
  const tags = ['oauth'];
  // Providers belong to the organization: any key of it reads them, with or without X-Tenant-Id. A change
  // redirects what every workspace trusts (its client secret, codes and refresh tokens go to token_url),
  // so only an organization admin key makes one: a workspace's admin must not rewrite another's provider.
  /** If-Match is checked against this: the provider as its GET shows it, read in the write's transaction. */
  const current = async (request: FastifyRequest, tx: Db) =>
    providerResponse(
      await providers.get(request.caller.organizationId, (request.params as { provider_id: string }).provider_id, tx),
    );
  const actor = (request: FastifyRequest): ProviderActor => ({
    organizationId: request.caller.organizationId,
    keyId: request.caller.keyId,
  });

  app.post(
    '/v2/auth/providers',
    {
      config: needs({ auth: 'organization', admin: 'organization', idempotent: true, etag: true }),
      schema: {
        operationId: 'createOAuthProvider',
        tags,
        summary: 'Register an OAuth provider',
        description:
          'Register <SLIPWAY_PUBLIC_URL>/v2/auth/callback/<provider_id> as the redirect URI at the provider.',
        body: CreateBody,
        response: { 201: OAuthProvider, ...errorResponses(400, 401, 403, 409, 422, 502, 503) },
      },
    },
    async (request, reply) =>
      reply.status(201).send(providerResponse(await providers.create(actor(request), request.body))),
  );

  app.get(
    '/v2/auth/providers',
    {
      config: needs({ auth: 'organization' }),
      schema: {
        operationId: 'listOAuthProviders',
        tags,
        summary: "List the organization's OAuth providers",
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(OAuthProvider, 'A page of providers, newest first.'),
          ...errorResponses(401, 403, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await providers.list(request.caller.organizationId, limit, offset);
      return envelope(rows.map(providerResponse), offset);
    },
  );

  app.get(
    '/v2/auth/providers/:provider_id',
    {
      config: needs({ auth: 'organization', etag: true }),
      schema: {
        operationId: 'getOAuthProvider',
        tags,
        summary: 'Get an OAuth provider',
        params: Params,
        response: { 200: OAuthProvider, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => providerResponse(await providers.get(request.caller.organizationId, request.params.provider_id)),
  );

  app.patch(
    '/v2/auth/providers/:provider_id',
    {
      config: needs({ auth: 'organization', admin: 'organization', idempotent: true, etag: true, ifMatch: current }),
      schema: {
        operationId: 'updateOAuthProvider',
        tags,
        summary: 'Update an OAuth provider',
        description:
          'A new mcp_server_url of a provider_type "mcp" provider is discovered as at creation: the endpoints, ' +
          'and a client registered at its authorization server, follow it (unless the request gives them). ' +
          '409 while tokens of the provider exist; 502/503 when the new server answers nonsense or cannot be ' +
          'reached. A refused change changes nothing.',
        params: Params,
        body: UpdateBody,
        response: { 200: OAuthProvider, ...errorResponses(400, 401, 403, 404, 409, 422, 502, 503) },
      },
    },
    async (request) =>
      providerResponse(
        await providers.update(actor(request), request.params.provider_id, request.body, {
          precondition: request.precondition,
        }),
      ),
  );

  app.delete(
    '/v2/auth/providers/:provider_id',
    {
      config: needs({ auth: 'organization', admin: 'organization', ifMatch: current }),
      schema: {
        operationId: 'deleteOAuthProvider',
        tags,
        summary: 'Delete an OAuth provider',
        description: '409 while tokens of the provider exist.',
        params: Params,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 409, 422) },
      },
    },
    async (request, reply) => {
      await providers.remove(actor(request), request.params.provider_id, { precondition: request.precondition });
      return reply.status(204).send(null);
    },
  );
};
