/**
 * OAuth providers of an organization: the rules of create and update (URLs must be https unless
 * insecure development mode is on; a confidential client needs its secret; a public client needs
 * PKCE, which is on by default; the slug never changes),
 * the client secret sealed on write, and the provider as the OAuth client needs it, secret opened.
 */
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, notFound } from '../errors.ts';
import type { DiscoveredMcpServer, OAuthClient } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import type { OAuthProviderConfig } from '../oauth/oauth-provider-config.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import {
  countProviderTokens,
  deleteProvider,
  findProvider,
  insertProvider,
  listProviders,
  updateProvider,
  type ProviderSettings,
} from '../store/oauth-providers.ts';
import type { Database, Db, OAuthProviderRow } from '../store/schema.ts';
import { workspaceIdsOf } from '../store/tenancy.ts';
import type { Kysely } from 'kysely';
import { callbackUrl } from './oauth-flow.ts';
import { flowErrorToAppError } from './oauth-tokens.ts';
import type { WriteConditions } from './preconditions.ts';

/**
 * Who acts: an organization admin key (routes declare it: src/routes/oauth-providers.ts). Providers
 * belong to the organization, and every workspace of it trusts them, so the audit event of a change
 * is written to every workspace of the organization.
 */
export interface ProviderActor {
  organizationId: string;
  keyId: string;
}

/** The writable settings as the API names them; `client_secret` in clear (sealed here). */
export interface ProviderInput {
  provider_id?: string;
  name?: string;
  client_id?: string;
  client_secret?: string | null;
  auth_url?: string;
  token_url?: string;
  revocation_url?: string | null;
  userinfo_url?: string | null;
  issuer?: string | null;
  uses_pkce?: boolean;
  code_challenge_method?: ProviderSettings['code_challenge_method'];
  token_endpoint_auth_method?: ProviderSettings['token_endpoint_auth_method'];
  provider_type?: string | null;
  mcp_server_url?: string | null;
  scopes?: string[] | null;
}

type CreateInput = ProviderInput & Required<Pick<ProviderInput, 'provider_id' | 'name'>>;

const URL_FIELDS = ['auth_url', 'token_url', 'revocation_url', 'userinfo_url', 'issuer', 'mcp_server_url'] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface OAuthProviderServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  /** SLIPWAY_ALLOW_INSECURE_OAUTH: plain http provider URLs, for development and tests only. */
  allowInsecure: boolean;
  /** Discovers and registers at an MCP server's authorization server (provider_type `mcp`). */
  client?: OAuthClient;
  /** SLIPWAY_PUBLIC_URL: the callback URL a dynamically registered client is registered with. */
  publicUrl?: string;
}

/** The provider_type of a provider whose tokens are for one MCP server (docs/oauth.md, "MCP servers"). */
export const MCP_PROVIDER_TYPE = 'mcp';

/** One event of a provider change in each workspace of its organization: each of them uses the provider. */
async function recordProviderEvent(
  tx: Db,
  actor: ProviderActor,
  event: Pick<EventInput, 'subjectId' | 'type' | 'data'>,
): Promise<void> {
  const workspaces = await workspaceIdsOf(tx, actor.organizationId);
  await recordEvents(
    tx,
    workspaces.map((workspaceId) => ({ ...event, workspaceId, subjectType: 'oauth_provider' as const })),
  );
}

export function createOAuthProviderService({
  db,
  secretBox,
  allowInsecure,
  client,
  publicUrl,
}: OAuthProviderServiceDeps) {
  /**
   * What a provider of provider_type `mcp` named by its mcp_server_url alone lacks, found as the MCP
   * authorization specification says: the authorization server from the server's protected-resource
   * metadata, its endpoints from its metadata, and a client registered there (RFC 7591) unless a
   * client_id is given. Given endpoints and client are kept as they are.
   */
  async function completeMcpProvider(
    input: CreateInput,
    registerClient: (server: DiscoveredMcpServer) => boolean = () => input.client_id === undefined,
  ): Promise<Partial<ProviderSettings>> {
    if (!client || !publicUrl) throw new AppError('invalid_request', 'MCP discovery is not available here');
    try {
      const server = await client.discoverMcpServer(input.mcp_server_url!);
      const found: Partial<ProviderSettings> = {
        auth_url: server.auth_url,
        token_url: server.token_url,
        revocation_url: server.revocation_url,
        issuer: server.issuer,
        mcp_server_url: server.resource,
        uses_pkce: true,
        code_challenge_method: 'S256',
        ...(input.scopes === undefined && server.scopes_supported.length > 0
          ? { scopes: server.scopes_supported }
          : {}),
      };
      if (registerClient(server)) {
        const registered = await client.registerClient(server, {
          redirectUri: callbackUrl(publicUrl, input.provider_id),
          clientName: `Slipway (${input.name})`,
          scopes: input.scopes ?? server.scopes_supported,
        });
        Object.assign(found, {
          client_id: registered.client_id,
          client_secret_encrypted: registered.client_secret === null ? null : secretBox.seal(registered.client_secret),
          token_endpoint_auth_method: registered.token_endpoint_auth_method,
          is_dynamic_client: true,
        });
      }
      return found;
    } catch (err) {
      if (err instanceof OAuthFlowError) throw flowErrorToAppError(err, 'mcp_server_url: ');
      throw err;
    }
  }

  /**
   * Provider URLs must be https: tokens and the client secret travel to them. Plain http only in
   * insecure development mode.
   */
  function checkUrls(settings: Partial<ProviderSettings>): void {
    for (const field of URL_FIELDS) {
      const value = settings[field];
      if (value === undefined || value === null) continue;
      if (!URL.canParse(value)) throw new AppError('invalid_request', `${field} is not a valid URL`);
      const { protocol } = new URL(value);
      if (protocol === 'https:') continue;
      if (protocol === 'http:' && allowInsecure) continue;
      throw new AppError(
        'invalid_request',
        protocol === 'http:'
          ? `${field} must use https (plain http is accepted only when the service runs with SLIPWAY_ALLOW_INSECURE_OAUTH=1)`
          : `${field} must be an https URL`,
      );
    }
  }

  /** A confidential client cannot authenticate at the token endpoint without its secret. */
  function checkClientAuthentication(method: ProviderSettings['token_endpoint_auth_method'], hasSecret: boolean): void {
    if (method !== 'none' && !hasSecret) {
      throw new AppError(
        'invalid_request',
        `client_secret is required for token_endpoint_auth_method ${method} (use none for a public client)`,
      );
    }
  }

  /**
   * A public client (no secret) cannot prove at the token endpoint that the code is its own: without
   * PKCE, whoever intercepts the code gets the token (RFC 9700 §2.1.1 requires PKCE for public clients).
   */
  function checkPublicClientPkce(method: ProviderSettings['token_endpoint_auth_method'], usesPkce: boolean): void {
    if (method === 'none' && !usesPkce) {
      throw new AppError(
        'invalid_request',
        'A public client (token_endpoint_auth_method none) must use PKCE (RFC 9700): set uses_pkce to true, or give the client a secret',
      );
    }
  }

  /** The slug is part of the callback URL registered at the provider. */
  function checkImmutable(current: OAuthProviderRow, input: ProviderInput): void {
    if (input.provider_id !== undefined && input.provider_id !== current.provider_id) {
      throw new AppError(
        'field_immutable',
        'provider_id cannot be changed after creation (it is part of the callback URL registered at the provider)',
      );
    }
  }

  /**
   * Whether an update gives an MCP provider another MCP server to be discovered anew: as at creation,
   * unless the request itself gives the client and both endpoints.
   */
  function movesMcpServer(current: OAuthProviderRow, input: ProviderInput): boolean {
    const type = input.provider_type !== undefined ? input.provider_type : current.provider_type;
    return (
      type === MCP_PROVIDER_TYPE &&
      typeof input.mcp_server_url === 'string' &&
      input.mcp_server_url !== current.mcp_server_url &&
      (input.client_id === undefined || input.auth_url === undefined || input.token_url === undefined)
    );
  }

  /**
   * A provider's tokens were issued for its MCP server, with a person's consent to that server: while
   * any exists the server cannot change (their refreshes would ask the new one's authorization server,
   * or the same one for another resource).
   */
  async function refuseWhileTokens(from: Db, current: OAuthProviderRow): Promise<void> {
    const tokens = await countProviderTokens(from, current.id);
    if (tokens > 0)
      throw new AppError(
        'conflict',
        `OAuth provider '${current.provider_id}' has ${tokens} token(s) issued for its MCP server; ` +
          `delete them first (DELETE /v2/auth/tokens/{id}) to give it another mcp_server_url.`,
      );
  }

  /** The input as stored columns; only the fields present in `input`. */
  function settingsOf(input: ProviderInput): Partial<ProviderSettings> {
    const out: Partial<ProviderSettings> = {};
    const copy = <K extends keyof ProviderSettings & keyof ProviderInput>(key: K) => {
      if (input[key] !== undefined) (out as Record<string, unknown>)[key] = input[key];
    };
    for (const key of [
      'name',
      'client_id',
      'auth_url',
      'token_url',
      'revocation_url',
      'userinfo_url',
      'issuer',
      'uses_pkce',
      'code_challenge_method',
      'token_endpoint_auth_method',
      'provider_type',
      'mcp_server_url',
    ] as const)
      copy(key);
    if (input.scopes !== undefined) out.scopes = [...new Set(input.scopes ?? [])];
    if (input.client_secret !== undefined)
      out.client_secret_encrypted = input.client_secret === null ? null : secretBox.seal(input.client_secret);
    return out;
  }

  async function mustFind(organizationId: string, ref: string, from: Db = db): Promise<OAuthProviderRow> {
    const row = await findProvider(from, organizationId, ref, { lock: false });
    if (!row) throw notFound('OAuth provider', ref);
    return row;
  }

  return {
    async create(actor: ProviderActor, input: CreateInput): Promise<OAuthProviderRow> {
      if (UUID.test(input.provider_id))
        throw new AppError(
          'invalid_request',
          'provider_id must be a slug, not a UUID (the path accepts both, so a UUID-shaped slug would be ambiguous)',
        );
      const discovered =
        input.provider_type === MCP_PROVIDER_TYPE &&
        input.mcp_server_url &&
        (input.client_id === undefined || input.auth_url === undefined || input.token_url === undefined)
          ? await completeMcpProvider(input)
          : {};
      const missing = (['client_id', 'auth_url', 'token_url'] as const).filter(
        (field) => input[field] === undefined && discovered[field] === undefined,
      );
      if (missing.length > 0)
        throw new AppError(
          'invalid_request',
          `${missing.join(', ')} required (or provider_type "mcp" with mcp_server_url, which discovers them)`,
        );
      const settings: ProviderSettings = {
        provider_id: input.provider_id,
        name: input.name,
        client_id: '',
        client_secret_encrypted: null,
        auth_url: '',
        token_url: '',
        revocation_url: null,
        userinfo_url: null,
        issuer: null,
        // PKCE by default (RFC 9700 §2.1.1): it costs nothing, and providers that lack it ignore it.
        uses_pkce: true,
        code_challenge_method: 'S256',
        token_endpoint_auth_method: 'client_secret_post',
        provider_type: null,
        mcp_server_url: null,
        scopes: [],
        is_dynamic_client: false,
        ...discovered,
        ...settingsOf(input),
      };
      checkUrls(settings);
      checkClientAuthentication(settings.token_endpoint_auth_method, settings.client_secret_encrypted !== null);
      checkPublicClientPkce(settings.token_endpoint_auth_method, settings.uses_pkce);
      return db.transaction().execute(async (tx) => {
        const row = await insertProvider(tx, actor.organizationId, settings);
        if (!row)
          throw new AppError(
            'conflict',
            `An OAuth provider with provider_id '${input.provider_id}' already exists in this organization.`,
          );
        await recordProviderEvent(tx, actor, {
          subjectId: row.id,
          type: 'oauth_provider.created',
          data: { provider_id: row.provider_id, by_key: actor.keyId },
        });
        return row;
      });
    },

    async update(
      actor: ProviderActor,
      ref: string,
      input: ProviderInput,
      conditions: WriteConditions = {},
    ): Promise<OAuthProviderRow> {
      // A new MCP server is discovered (and a client registered) before the transaction: no row lock
      // waits for another server. The row is then written only if it has not changed meanwhile.
      const seen = await mustFind(actor.organizationId, ref);
      const moving = movesMcpServer(seen, input);
      let discovered: Partial<ProviderSettings> = {};
      if (moving) {
        await conditions.precondition?.(db);
        checkImmutable(seen, input);
        checkUrls({ mcp_server_url: input.mcp_server_url! });
        await refuseWhileTokens(db, seen);
        discovered = await completeMcpProvider(
          {
            provider_id: seen.provider_id,
            name: input.name ?? seen.name,
            mcp_server_url: input.mcp_server_url!,
            ...(input.client_id !== undefined ? { client_id: input.client_id } : {}),
            ...(input.scopes !== undefined ? { scopes: input.scopes } : {}),
          },
          // A client of another authorization server is of no use at the new one; a client Slipway
          // registered follows its server. A client registered by hand at the same server stays.
          (server) => input.client_id === undefined && (seen.is_dynamic_client || server.issuer !== seen.issuer),
        );
        // A client given by hand with the move is not a registered one.
        if (input.client_id !== undefined) discovered.is_dynamic_client = false;
      }
      return db.transaction().execute(async (tx) => {
        const current = await findProvider(tx, actor.organizationId, ref, { lock: true });
        if (!current) throw notFound('OAuth provider', ref);
        await conditions.precondition?.(tx);
        checkImmutable(current, input);
        if (moving) {
          if (current.updated_at.getTime() !== seen.updated_at.getTime())
            throw new AppError(
              'conflict',
              `OAuth provider '${current.provider_id}' was changed while its new MCP server was discovered; send the change again.`,
            );
          await refuseWhileTokens(tx, current);
        }
        const change = { ...discovered, ...settingsOf(input) };
        checkUrls(change);
        const secretAfter =
          change.client_secret_encrypted !== undefined
            ? change.client_secret_encrypted
            : current.client_secret_encrypted;
        const methodAfter = change.token_endpoint_auth_method ?? current.token_endpoint_auth_method;
        checkClientAuthentication(methodAfter, secretAfter !== null);
        checkPublicClientPkce(methodAfter, change.uses_pkce ?? current.uses_pkce);
        const row = await updateProvider(tx, current.id, change);
        // The names of the changed fields only; values (the secret above all) stay out of the log.
        await recordProviderEvent(tx, actor, {
          subjectId: row.id,
          type: 'oauth_provider.updated',
          data: {
            fields: [...new Set([...Object.keys(input), ...Object.keys(discovered)])].sort(),
            by_key: actor.keyId,
          },
        });
        return row;
      });
    },

    async remove(actor: ProviderActor, ref: string, conditions: WriteConditions = {}): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const current = await findProvider(tx, actor.organizationId, ref, { lock: true });
        if (!current) throw notFound('OAuth provider', ref);
        await conditions.precondition?.(tx);
        const tokens = await countProviderTokens(tx, current.id);
        if (tokens > 0) {
          throw new AppError(
            'conflict',
            `OAuth provider '${current.provider_id}' still has ${tokens} token(s) in this organization; ` +
              `delete them first (DELETE /v2/auth/tokens/{id} revokes each at the provider).`,
          );
        }
        // Authorizations in progress go with it (on delete cascade): their callbacks then fail cleanly.
        await deleteProvider(tx, current.id);
        await recordProviderEvent(tx, actor, {
          subjectId: current.id,
          type: 'oauth_provider.deleted',
          data: { provider_id: current.provider_id, by_key: actor.keyId },
        });
      });
    },

    get: (organizationId: string, ref: string, from: Db = db) => mustFind(organizationId, ref, from),
    list: (organizationId: string, limit: number, offset: number) => listProviders(db, organizationId, limit, offset),

    /** The provider as the OAuth client needs it, with the client secret opened. */
    config(row: OAuthProviderRow): OAuthProviderConfig {
      return {
        auth_url: row.auth_url,
        token_url: row.token_url,
        client_id: row.client_id,
        client_secret: row.client_secret_encrypted === null ? null : secretBox.open(row.client_secret_encrypted),
        token_endpoint_auth_method: row.token_endpoint_auth_method,
        uses_pkce: row.uses_pkce,
        code_challenge_method: row.code_challenge_method,
        scopes: row.scopes,
        revocation_url: row.revocation_url,
        userinfo_url: row.userinfo_url,
        issuer: row.issuer,
        resource: row.provider_type === MCP_PROVIDER_TYPE ? row.mcp_server_url : null,
      };
    },
  };
}

export type OAuthProviderService = ReturnType<typeof createOAuthProviderService>;
