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
import type { Clock } from '../clock.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { notFound, type ErrorCode } from '../errors.ts';
import type { OAuthClient } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import { recordEvents } from '../store/events.ts';
import {
  authorizationStatus,
  claimAuthorization,
  deleteOldAuthorizations,
  findAuthorizationByState,
  getAuthorization,
  insertAuthorization,
} from '../store/oauth-authorizations.ts';
import { findProvider } from '../store/oauth-providers.ts';
import { activeTokensOf } from '../store/oauth-tokens.ts';
import type { Database } from '../store/schema.ts';
import { createFlowCompletion } from './oauth-flow-completion.ts';
import type { OAuthProviderService } from './oauth-providers.ts';
import { flowErrorToAppError, isUsable, type WarnLogger } from './oauth-token-rules.ts';

/** How long a person has to finish signing in at the provider. */
export const AUTHORIZATION_TTL_SECONDS = 10 * 60;
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
  /** What authorizations' expiry goes by (src/store/oauth-authorizations.ts); the database's `now()` when absent. */
  now?: Clock;
}

const hashState = (state: string): Buffer => createHash('sha256').update(state, 'utf8').digest();

const EXPIRED_MESSAGE =
  'The authorization expired before it was completed; start again with POST /v2/auth/authenticate.';

/** The callback URL of a provider, as it must be registered at the provider. */
export function callbackUrl(publicUrl: string, providerSlug: string): string {
  return `${publicUrl}/v2/auth/callback/${encodeURIComponent(providerSlug)}`;
}

/** What `wait` answers for the flow's row as it is now. */
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

export function createOAuthFlowService(deps: OAuthFlowServiceDeps) {
  const { db, secretBox, client, providers, publicUrl, now } = deps;

  const { connect, fail, exchange } = createFlowCompletion(deps);

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
        await deleteOldAuthorizations(tx, now);
        const row = await insertAuthorization(
          tx,
          {
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
          },
          now,
        );
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
      const flow = await findAuthorizationByState(db, hashState(state), now);
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
      if (flow.expired || !(await claimAuthorization(db, flow.id, now))) {
        const current = await authorizationStatus(db, flow.id, now);
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
      const flow = await getAuthorization(db, workspaceId, authId, now);
      if (!flow) throw notFound('Authorization', authId);
      const deadline = Date.now() + Math.min(timeoutSeconds, MAX_WAIT_SECONDS) * 1000;
      for (;;) {
        const row = await authorizationStatus(db, authId, now);
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
