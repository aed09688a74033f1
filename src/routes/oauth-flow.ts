/**
 * The authorization flow and its tokens: POST /v2/auth/authenticate, the browser's callback (no API
 * key), the long-poll GET /v2/auth/wait/{auth_id}, and the tokens it yields (never their values).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
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
import {
  MAX_WAIT_SECONDS,
  type AuthenticateResult,
  type OAuthFlowService,
  type WaitResult,
} from '../service/oauth-flow.ts';
import type { OAuthTokenService } from '../service/oauth-tokens.ts';
import type { TokenView } from '../store/oauth-tokens.ts';
import { sendCallbackPage } from './oauth-callback-page.ts';
import { needs } from '../http/route-needs.ts';

const Scope = Type.String({ minLength: 1, maxLength: 256, pattern: '^[\\x21\\x23-\\x5b\\x5d-\\x7e]+$' });
export const AgentId = Type.String({ minLength: 1, maxLength: 256, description: 'Your own name for the agent.' });

const AuthenticateBody = Type.Object(
  {
    provider_id: Type.String({ minLength: 1, maxLength: 64, description: "The provider's provider_id (slug) or id." }),
    scopes: Type.Optional(
      Nullable(Type.Array(Scope, { maxItems: 100, description: "Default: the provider's scopes." })),
    ),
    agent_id: Type.Optional(Nullable(AgentId)),
  },
  { title: 'AuthenticateRequest' },
);

const AuthenticateResponse = Type.Object(
  {
    status: StringEnum(['completed', 'pending'] as const),
    auth_id: Nullable(Uuid({ description: 'pending: pass to GET /v2/auth/wait/{auth_id}.' })),
    // Its state is stored only hashed: the answer holding it must be kept nowhere either.
    url: Nullable(ShownOnceString({ description: 'pending: send the person here (shown only in this response).' })),
    expires_at: Nullable(DateTime({ description: 'pending: when the authorization stops being accepted.' })),
    token_id: Nullable(Uuid({ description: 'completed: the usable token.' })),
    connection_id: Nullable(Uuid({ description: 'completed with agent_id: the agent connection.' })),
  },
  {
    title: 'AuthenticateResult',
    description: 'completed when a usable token of the caller exists, else pending with the authorization URL.',
  },
);

const WaitResponse = Type.Object(
  {
    auth_id: Uuid(),
    status: StringEnum(['pending', 'completed', 'failed'] as const),
    token_id: Nullable(Uuid()),
    connection_id: Nullable(Uuid()),
    error: Nullable(Type.Object({ reason: Type.String(), message: Type.String() })),
  },
  { title: 'AuthorizationStatus' },
);

const OAuthToken = Type.Object(
  {
    id: Uuid(),
    provider_id: Type.String({ description: "The provider's provider_id (slug)." }),
    status: StringEnum(['active', 'refresh_failed'] as const),
    status_message: Nullable(Type.String({ description: 'Why a refresh failed.' })),
    provider_account_label: Nullable(Type.String()),
    scopes: Type.Array(Type.String()),
    expires_at: Nullable(
      DateTime({ description: 'When the current access token expires; it is refreshed automatically.' }),
    ),
    has_refresh_token: Type.Boolean(),
    created_by: Type.String({ description: 'The id of the API key that authorized it.' }),
    created_at: DateTime(),
    updated_at: DateTime(),
    refreshed_at: Nullable(DateTime()),
  },
  { title: 'OAuthToken', description: 'An OAuth token, without its values.' },
);

const TokenParams = Type.Object({ token_id: Uuid() });

/**
 * What a provider sends back to the callback (RFC 6749 §4.1.2 and §4.1.2.1, RFC 9207). Documented, not
 * validated: whatever arrives (a repeated state, an unknown field), the person gets the page.
 */
const CallbackQuery = Type.Object({
  code: Type.Optional(Type.String({ description: 'The authorization code, when the person agreed.' })),
  state: Type.Optional(
    Type.String({ description: 'The state of the authorization request, sent back unchanged; exactly one.' }),
  ),
  error: Type.Optional(
    Type.String({ description: 'An OAuth error code (access_denied, invalid_scope...) instead of a code.' }),
  ),
  error_description: Type.Optional(Type.String({ description: "The provider's explanation of error." })),
  error_uri: Type.Optional(Type.String({ description: 'A page about error.' })),
  iss: Type.Optional(
    Type.String({ description: 'The issuer (RFC 9207); checked when the provider has one configured.' }),
  ),
});

const CallbackPage = (description: string) => ({
  description,
  content: { 'text/html': { schema: Type.String({ description: 'A small page for the browser.' }) } },
});

const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());

function tokenResponse(row: TokenView): Static<typeof OAuthToken> {
  return {
    id: row.id,
    provider_id: row.provider_slug,
    status: row.status,
    status_message: row.status_message,
    provider_account_label: row.provider_account_label,
    scopes: row.scopes,
    expires_at: iso(row.expires_at),
    has_refresh_token: row.refresh_token_encrypted !== null,
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    refreshed_at: iso(row.refreshed_at),
  };
}

function authenticateResponse(result: AuthenticateResult): Static<typeof AuthenticateResponse> {
  return result.status === 'completed'
    ? {
        status: 'completed',
        auth_id: null,
        url: null,
        expires_at: null,
        token_id: result.token_id,
        connection_id: result.connection_id,
      }
    : {
        status: 'pending',
        auth_id: result.auth_id,
        url: result.url,
        expires_at: result.expires_at.toISOString(),
        token_id: null,
        connection_id: null,
      };
}

/** The flow: authenticate, the provider's callback, and the long poll that waits for it. */
const authorizationRoutes: FastifyPluginAsyncTypebox<{ flow: OAuthFlowService; tokens: OAuthTokenService }> = async (
  app,
  { flow },
) => {
  const tags = ['oauth'];
  // Long polls end at once, with the status as it is, when the server starts closing.
  const closing = new AbortController();
  app.addHook('preClose', async () => closing.abort());

  app.post(
    '/v2/auth/authenticate',
    {
      config: needs({ auth: 'workspace', idempotent: true }),
      schema: {
        operationId: 'authenticate',
        tags,
        summary: 'Start (or reuse) an authorization',
        description:
          'Answers completed with a usable token of the caller for the provider and scopes, ' +
          'or pending with the URL to send the person to. With agent_id, the agent is connected ' +
          'to the token on completion.',
        body: AuthenticateBody,
        response: { 200: AuthenticateResponse, ...errorResponses(400, 401, 403, 404, 422, 502, 503) },
      },
    },
    async (request) => {
      const caller = {
        organizationId: request.caller.organizationId,
        workspaceId: workspaceOf(request),
        keyId: request.caller.keyId,
      };
      return authenticateResponse(await flow.authenticate(caller, request.body));
    },
  );

  app.get(
    '/v2/auth/callback/:provider_id',
    {
      config: needs({
        auth: 'none',
        // The query is documented, not validated (see CallbackQuery): it is added to the document only.
        swaggerTransform: ({ schema, url }) => ({ schema: { ...schema, querystring: CallbackQuery }, url }),
      }),
      // The query holds the authorization code: keep the request line out of the info-level access log.
      logLevel: 'warn',
      schema: {
        operationId: 'handleOAuthCallback',
        tags,
        summary: "The provider's redirect back (browser, no API key)",
        description:
          'Checks state (single use, unexpired), exchanges the code and shows a small HTML page saying whether it worked.',
        // No querystring schema: whatever the provider sends (code, state, error, iss), the answer is the page.
        params: Type.Object({ provider_id: Type.String({ maxLength: 256 }) }),
        response: {
          200: CallbackPage(
            'Authorization complete: the token is stored (and the agent connected, when one was named).',
          ),
          // The envelope too: a request the HTTP parser refuses is answered before this route runs.
          400: {
            description:
              'Nothing was stored: no single or no known state, a response used already or expired, or the person or the provider refused (the page says which); or the request is not valid HTTP (the error envelope, malformed_request).',
            content: { ...CallbackPage('').content, 'application/json': { schema: Type.Ref('ErrorBody') } },
          },
          502: CallbackPage('Nothing was stored: the provider answered the code exchange wrongly.'),
          503: {
            description:
              'Nothing was stored: the provider (the page) or the database (the error envelope) could not be reached.',
            content: { ...CallbackPage('').content, 'application/json': { schema: Type.Ref('ErrorBody') } },
          },
          ...errorResponses(422),
        },
      },
    },
    async (request, reply) => {
      const query = request.raw.url?.split('?')[1] ?? '';
      return sendCallbackPage(reply, await flow.callback(request.params.provider_id, new URLSearchParams(query)));
    },
  );

  app.get(
    '/v2/auth/wait/:auth_id',
    {
      // A wait is held open until the flow ends or its timeout: it takes a stream slot (src/http/stream-limits.ts).
      config: needs({
        auth: 'workspace',
        longLived: (request) => ((request.query as { timeout?: number }).timeout ?? 30) > 0,
      }),
      schema: {
        operationId: 'waitForAuthorization',
        tags,
        summary: 'Wait for an authorization to finish',
        description:
          `Long-polls until the flow completes or fails, or timeout seconds (0 to ${MAX_WAIT_SECONDS}, ` +
          `default 30) pass; then status is still pending.`,
        params: Type.Object({ auth_id: Uuid() }),
        querystring: Type.Object({
          timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_SECONDS, default: 30 })),
        }),
        response: { 200: WaitResponse, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request): Promise<WaitResult> =>
      flow.wait(workspaceOf(request), request.params.auth_id, request.query.timeout ?? 30, closing.signal),
  );
};

/** The tokens a flow stored: list, read, hand out and revoke. */
const tokenRoutes: FastifyPluginAsyncTypebox<{ flow: OAuthFlowService; tokens: OAuthTokenService }> = async (
  app,
  { tokens },
) => {
  const tags = ['oauth'];
  app.get(
    '/v2/auth/tokens',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listOAuthTokens',
        tags,
        summary: "List the workspace's OAuth tokens (never their values)",
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(OAuthToken, 'A page of tokens, newest first.'),
          ...errorResponses(401, 403, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await tokens.list(workspaceOf(request), { limit, offset });
      return envelope(rows.map(tokenResponse), offset);
    },
  );

  app.get(
    '/v2/auth/tokens/:token_id',
    {
      config: needs({ auth: 'workspace', etag: true }),
      schema: {
        operationId: 'getOAuthToken',
        tags,
        summary: 'Get an OAuth token (never its values)',
        params: TokenParams,
        response: { 200: OAuthToken, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => tokenResponse(await tokens.get(workspaceOf(request), request.params.token_id)),
  );

  app.delete(
    '/v2/auth/tokens/:token_id',
    {
      // If-Match is checked against the token as its GET shows it, under the token's claim.
      config: needs({
        auth: 'workspace',
        ifMatch: async (request, tx) =>
          tokenResponse(await tokens.get(workspaceOf(request), (request.params as { token_id: string }).token_id, tx)),
      }),
      schema: {
        operationId: 'deleteOAuthToken',
        tags,
        summary: 'Revoke and delete an OAuth token',
        description:
          'Revokes the token at the provider when it has a revocation endpoint, then deletes ' +
          'it and its agent connections. If revocation fails the token is kept (502/503) unless ' +
          'force=true.',
        params: TokenParams,
        querystring: Type.Object({ force: Type.Optional(Type.Boolean({ default: false })) }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422, 502, 503) },
      },
    },
    async (request, reply) => {
      await tokens.revoke(workspaceOf(request), request.params.token_id, {
        force: request.query.force ?? false,
        byKey: request.caller.keyId,
        precondition: request.precondition,
      });
      return reply.status(204).send(null);
    },
  );
};

export const oauthFlowRoutes: FastifyPluginAsyncTypebox<{ flow: OAuthFlowService; tokens: OAuthTokenService }> = async (
  app,
  opts,
) => {
  await authorizationRoutes(app, opts);
  await tokenRoutes(app, opts);
};
