/**
 * How an authorization-code flow ends (src/service/oauth-flow.ts): the code exchanged at the provider,
 * the token stored with the agent's connection and an account label, or the flow failed with its reason.
 */
import type { OAuthTokenSet } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import { findConnectionId, insertConnection } from '../store/agent-connections.ts';
import { recordEvents } from '../store/events.ts';
import { finishAuthorization, type AuthorizationView } from '../store/oauth-authorizations.ts';
import { getProviderById } from '../store/oauth-providers.ts';
import { insertToken } from '../store/oauth-tokens.ts';
import type { Db } from '../store/schema.ts';
import type { CallbackOutcome, OAuthFlowServiceDeps } from './oauth-flow.ts';
import type { OAuthProviderService } from './oauth-providers.ts';
import { accountLabel, flowErrorToAppError } from './oauth-token-rules.ts';

export function createFlowCompletion({ db, secretBox, client, providers, logger }: OAuthFlowServiceDeps) {
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

  return { connect, fail, exchange };
}
