/**
 * The authorization-code flow as the service runs it (docs/oauth.md, "The flow"):
 *
 *   authenticate ──> pending ──(callback, state claimed once)──> exchanging ──> completed (token stored)
 *        │                 └──(expired / provider error / bad code)───────────> failed (nothing stored)
 *        └──> completed at once, when a usable token of the caller already exists
 *
 * The state is sent to the provider and only its SHA-256 is stored; the callback finds the flow by it,
 * so a state that matches no flow is refused before anything else, and a used one cannot be replayed.
 * The PKCE verifier is sealed while the flow runs and dropped when it ends. `wait` long-polls a flow.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Kysely } from 'kysely';
import type { SecretBox } from '../crypto/secret-box.ts';
import { notFound, type ErrorCode } from '../errors.ts';
import type { OAuthClient, OAuthTokenSet } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import { findConnectionId, insertConnection } from '../store/agent-connections.ts';
import { recordEvents } from '../store/events.ts';
import {
  authorizationStatus,
  claimAuthorization,
  deleteOldAuthorizations,
  findAuthorizationByState,
  finishAuthorization,
  getAuthorization,
  insertAuthorization,
  type AuthorizationView,
} from '../store/oauth-authorizations.ts';
import { findProvider, getProviderById } from '../store/oauth-providers.ts';
import { activeTokensOf, insertToken } from '../store/oauth-tokens.ts';
import type { Database, Db } from '../store/schema.ts';
import type { OAuthProviderService } from './oauth-providers.ts';
import { accountLabel, flowErrorToAppError, isUsable, type WarnLogger } from './oauth-tokens.ts';

/** How long a person has to finish signing in at the provider. */
const AUTHORIZATION_TTL_SECONDS = 10 * 60;
/** Upper bound of one `wait` request; a client waits longer by asking again. */
export const MAX_WAIT_SECONDS = 60;
const WAIT_POLL_MS = 250;

export interface FlowCaller {
  organizationId: string;
  workspaceId: string;
  keyId: string;
}

export type AuthenticateResult =
  | { status: 'completed'; token_id: string; connection_id: string | null }
  | { status: 'pending'; auth_id: string; url: string; expires_at: Date };

export interface WaitResult {
  auth_id: string;
  status: 'pending' | 'completed' | 'failed';
  token_id: string | null;
  connection_id: string | null;
  error: { reason: string; message: string } | null;
}

/** What the callback page shows; a failure's `code` gives the page its status, as it would an error answer. */
export type CallbackOutcome =
  | { ok: true; providerName: string; accountLabel: string | null; agentId: string | null }
  | { ok: false; code: ErrorCode; message: string };

export interface OAuthFlowServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  client: OAuthClient;
  providers: OAuthProviderService;
  logger: WarnLogger;
  /** SLIPWAY_PUBLIC_URL: the callback URL registered at each provider is under it. */
  publicUrl: string;
}

const hashState = (state: string): Buffer => createHash('sha256').update(state, 'utf8').digest();

const EXPIRED_MESSAGE =
  'The authorization expired before it was completed; start again with POST /v2/auth/authenticate.';

/** The callback URL of a provider, as it must be registered at the provider. */
export function callbackUrl(publicUrl: string, providerSlug: string): string {
  return `${publicUrl}/v2/auth/callback/${encodeURIComponent(providerSlug)}`;
}

export function createOAuthFlowService(deps: OAuthFlowServiceDeps) {
  const { db, secretBox, client, providers, logger, publicUrl } = deps;

  /** The agent's connection to the token: made when missing (a connection is unique per agent and token). */
  async function connect(
    tx: Db,
    workspaceId: string,
    agentId: string | null,
    tokenId: string,
    createdBy: string,
  ): Promise<string | null> {
    if (agentId === null) return null;
    const created = await insertConnection(tx, { workspaceId, agentId, tokenId, createdBy });
    if (created === null) return (await findConnectionId(tx, agentId, tokenId)) ?? null;
    await recordEvents(tx, [
      {
        workspaceId,
        subjectType: 'agent_connection',
        subjectId: created,
        type: 'agent_connection.created',
        data: { agent_id: agentId, oauth_token_id: tokenId, by_key: createdBy },
      },
    ]);
    return created;
  }

  async function fail(flow: AuthorizationView, reason: string, message: string): Promise<void> {
    await db.transaction().execute(async (tx) => {
      await finishAuthorization(tx, flow.id, { status: 'failed', reason, message });
      await recordEvents(tx, [
        {
          workspaceId: flow.workspace_id,
          subjectType: 'oauth_authorization',
          subjectId: flow.id,
          type: 'oauth_authorization.failed',
          fromStatus: flow.status,
          toStatus: 'failed',
          data: { reason, message },
        },
      ]);
    });
  }

  /** Best effort: a label makes the token recognizable, but a flow never fails for lack of one. */
  async function labelOf(
    flow: AuthorizationView,
    config: ReturnType<OAuthProviderService['config']>,
    tokens: OAuthTokenSet,
  ): Promise<{ label: string | null; subject: string | null }> {
    const fromIdToken = accountLabel(tokens.idTokenClaims);
    const subject = typeof tokens.idTokenClaims?.sub === 'string' ? tokens.idTokenClaims.sub : null;
    if (fromIdToken !== null) return { label: fromIdToken, subject };
    try {
      const claims = await client.userinfo(config, tokens.accessToken, { issuer: tokens.issuer });
      return { label: accountLabel(claims), subject: subject ?? (typeof claims?.sub === 'string' ? claims.sub : null) };
    } catch (err) {
      if (!(err instanceof OAuthFlowError)) throw err;
      logger.warn(
        { auth_id: flow.id, reason: err.reason },
        'userinfo request failed; the token is stored without an account label',
      );
      return { label: null, subject };
    }
  }

  async function exchange(flow: AuthorizationView, state: string, params: URLSearchParams): Promise<CallbackOutcome> {
    const provider = await getProviderById(db, flow.provider_id);
    if (!provider) throw new Error(`The provider of authorization ${flow.id} is missing`);
    const config = providers.config(provider);
    let tokens: OAuthTokenSet;
    try {
      const codeVerifier = flow.code_verifier_encrypted === null ? null : secretBox.open(flow.code_verifier_encrypted);
      tokens = await client.exchangeCode(
        config,
        { state, codeVerifier, nonce: flow.nonce, redirectUri: flow.redirect_uri, scopes: flow.scopes },
        params,
      );
    } catch (err) {
      if (!(err instanceof OAuthFlowError)) {
        await fail(flow, 'internal', 'The authorization failed unexpectedly; see the service log.');
        throw err;
      }
      logger.warn(
        { auth_id: flow.id, reason: err.reason, oauth_error: err.oauthError, library_code: err.libraryCode },
        'OAuth authorization failed',
      );
      await fail(flow, err.reason, err.message);
      return { ok: false, code: flowErrorToAppError(err).code, message: err.message };
    }
    let label: string | null;
    try {
      ({ label } = await store(flow, config, tokens));
    } catch (err) {
      // The flow must not stay `exchanging` (wait would say pending until it expires).
      await fail(flow, 'internal', 'The authorization failed unexpectedly; see the service log.');
      throw err;
    }
    return { ok: true, providerName: provider.name, accountLabel: label, agentId: flow.agent_id };
  }

  /** Stores the token (and the agent's connection) and completes the flow, in one transaction. */
  async function store(
    flow: AuthorizationView,
    config: ReturnType<OAuthProviderService['config']>,
    tokens: OAuthTokenSet,
  ): Promise<{ label: string | null }> {
    const { label, subject } = await labelOf(flow, config, tokens);
    await db.transaction().execute(async (tx) => {
      const token = await insertToken(tx, {
        workspaceId: flow.workspace_id,
        providerId: flow.provider_id,
        accessTokenSealed: secretBox.seal(tokens.accessToken),
        refreshTokenSealed: tokens.refreshToken === null ? null : secretBox.seal(tokens.refreshToken),
        tokenType: tokens.tokenType,
        issuer: tokens.issuer,
        expiresAt: tokens.expiresAt,
        scopes: tokens.scopes,
        accountLabel: label,
        subject,
        createdBy: flow.created_by,
      });
      const connectionId = await connect(tx, flow.workspace_id, flow.agent_id, token.id, flow.created_by);
      await finishAuthorization(tx, flow.id, { status: 'completed', tokenId: token.id, connectionId });
      await recordEvents(tx, [
        {
          workspaceId: flow.workspace_id,
          subjectType: 'oauth_token',
          subjectId: token.id,
          type: 'oauth_token.created',
          toStatus: 'active',
          data: { provider_id: flow.provider_slug, auth_id: flow.id, by_key: flow.created_by },
        },
        {
          workspaceId: flow.workspace_id,
          subjectType: 'oauth_authorization',
          subjectId: flow.id,
          type: 'oauth_authorization.completed',
          fromStatus: 'exchanging',
          toStatus: 'completed',
          data: { oauth_token_id: token.id },
        },
      ]);
    });
    return { label };
  }

  function waitResult(id: string, row: NonNullable<Awaited<ReturnType<typeof authorizationStatus>>>): WaitResult {
    const base = { auth_id: id, token_id: row.oauth_token_id, connection_id: row.agent_connection_id };
    if (row.status === 'completed') return { ...base, status: 'completed', error: null };
    if (row.status === 'failed')
      return {
        ...base,
        status: 'failed',
        error: { reason: row.failure_reason ?? 'failed', message: row.failure_message ?? 'The authorization failed.' },
      };
    if (row.expired) return { ...base, status: 'failed', error: { reason: 'expired', message: EXPIRED_MESSAGE } };
    return { ...base, status: 'pending', error: null };
  }

  return {
    async authenticate(
      caller: FlowCaller,
      request: { provider_id: string; scopes?: string[] | null; agent_id?: string | null },
    ): Promise<AuthenticateResult> {
      const provider = await findProvider(db, caller.organizationId, request.provider_id);
      if (!provider) throw notFound('OAuth provider', request.provider_id);
      const scopes = [...new Set(request.scopes ?? provider.scopes)];
      const agentId = request.agent_id ?? null;

      const reusable = (await activeTokensOf(db, caller.workspaceId, provider.id, caller.keyId)).find((token) =>
        isUsable(token, scopes, Date.now()),
      );
      if (reusable) {
        const connectionId = await db
          .transaction()
          .execute((tx) => connect(tx, caller.workspaceId, agentId, reusable.id, caller.keyId));
        return { status: 'completed', token_id: reusable.id, connection_id: connectionId };
      }

      let pending;
      try {
        pending = await client.createAuthorizationRequest(providers.config(provider), {
          redirectUri: callbackUrl(publicUrl, provider.provider_id),
          scopes,
        });
      } catch (err) {
        if (err instanceof OAuthFlowError) throw flowErrorToAppError(err);
        throw err;
      }
      const flow = await db.transaction().execute(async (tx) => {
        await deleteOldAuthorizations(tx);
        const row = await insertAuthorization(tx, {
          workspaceId: caller.workspaceId,
          providerId: provider.id,
          agentId,
          stateHash: hashState(pending.state),
          codeVerifierSealed: pending.codeVerifier === null ? null : secretBox.seal(pending.codeVerifier),
          nonce: pending.nonce,
          redirectUri: pending.redirectUri,
          scopes: pending.scopes,
          createdBy: caller.keyId,
          ttlSeconds: AUTHORIZATION_TTL_SECONDS,
        });
        await recordEvents(tx, [
          {
            workspaceId: caller.workspaceId,
            subjectType: 'oauth_authorization',
            subjectId: row.id,
            type: 'oauth_authorization.started',
            toStatus: 'pending',
            data: { provider_id: provider.provider_id, agent_id: agentId, by_key: caller.keyId },
          },
        ]);
        return row;
      });
      return { status: 'pending', auth_id: flow.id, url: pending.url, expires_at: flow.expires_at };
    },

    /** The browser's return from the provider. Never throws for a flow problem: the page explains it. */
    async callback(providerSlug: string, params: URLSearchParams): Promise<CallbackOutcome> {
      const states = params.getAll('state');
      const state = states.length === 1 ? states[0]! : null;
      if (state === null || state === '') {
        return {
          ok: false,
          code: 'invalid_request',
          message:
            'The provider sent no single state parameter back, so this response cannot be tied to an authorization. Start again.',
        };
      }
      const flow = await findAuthorizationByState(db, hashState(state));
      if (!flow || flow.provider_slug !== providerSlug) {
        // A forged, mistyped or foreign state: refused without touching any flow (state mismatch).
        return {
          ok: false,
          code: 'invalid_request',
          message: 'This response does not belong to any authorization in progress (state mismatch). Start again.',
        };
      }
      if (flow.status !== 'pending') {
        return {
          ok: false,
          code: 'invalid_request',
          message:
            'This authorization response was already used; a sign-in link works once. Start again if you need a new token.',
        };
      }
      if (flow.expired || !(await claimAuthorization(db, flow.id))) {
        const current = await authorizationStatus(db, flow.id);
        if (current?.status === 'pending' && current.expired) {
          await fail(flow, 'expired', EXPIRED_MESSAGE);
          return { ok: false, code: 'invalid_request', message: EXPIRED_MESSAGE };
        }
        return {
          ok: false,
          code: 'invalid_request',
          message: 'This authorization response was already used; a sign-in link works once.',
        };
      }
      return exchange({ ...flow, status: 'exchanging' }, state, params);
    },

    /**
     * Waits until the flow leaves `pending` or `timeoutSeconds` pass, whichever is first; `signal`
     * (the server closing) ends the wait at once with the current status.
     */
    async wait(workspaceId: string, authId: string, timeoutSeconds: number, signal: AbortSignal): Promise<WaitResult> {
      const flow = await getAuthorization(db, workspaceId, authId);
      if (!flow) throw notFound('Authorization', authId);
      const deadline = Date.now() + Math.min(timeoutSeconds, MAX_WAIT_SECONDS) * 1000;
      for (;;) {
        const row = await authorizationStatus(db, authId);
        if (!row) throw notFound('Authorization', authId);
        const result = waitResult(authId, row);
        const remaining = deadline - Date.now();
        if (result.status !== 'pending' || remaining <= 0 || signal.aborted) return result;
        try {
          await sleep(Math.min(WAIT_POLL_MS, remaining), undefined, { signal });
        } catch (err) {
          // Only the abort rejects the sleep: answer with the status as it is.
          if (!signal.aborted) throw err;
        }
      }
    },
  };
}

export type OAuthFlowService = ReturnType<typeof createOAuthFlowService>;
