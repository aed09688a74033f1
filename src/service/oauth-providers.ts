/**
 * OAuth providers of an organization: the rules of create and update (URLs must be https unless
 * insecure development mode is on; a confidential client needs its secret; a public client needs
 * PKCE, which is on by default; the slug never changes),
 * the client secret sealed on write, and the provider as the OAuth client needs it, secret opened.
 */
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, notFound } from '../errors.ts';
import type { OAuthClient } from '../oauth/oauth-client.ts';
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
import { createMcpDiscovery } from './oauth-provider-discovery.ts';
import {
  checkClientAuthentication,
  checkImmutable,
  checkPublicClientPkce,
  checkUrls as checkRules,
  MCP_PROVIDER_TYPE,
  movesMcpServer,
  refuseWhileTokens,
  settingsOf as inputSettings,
} from './oauth-provider-rules.ts';
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

export type CreateInput = ProviderInput & Required<Pick<ProviderInput, 'provider_id' | 'name'>>;

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

export { MCP_PROVIDER_TYPE };

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

/** What an update reads of its service: the database, MCP discovery and the settings' rules. */
interface ProviderUpdateContext {
  db: Kysely<Database>;
  completeMcpProvider: ReturnType<typeof createMcpDiscovery>;
  checkUrls: (settings: Partial<ProviderSettings>) => void;
  settingsOf: (input: ProviderInput) => Partial<ProviderSettings>;
  mustFind: (organizationId: string, ref: string) => Promise<OAuthProviderRow>;
}

/**
 * An update of a provider's settings; one that moves an MCP provider to another server discovers it
 * (and registers a client there) first, outside the transaction.
 */
async function changeProvider(
  { db, completeMcpProvider, checkUrls, settingsOf, mustFind }: ProviderUpdateContext,
  actor: ProviderActor,
  ref: string,
  input: ProviderInput,
  conditions: WriteConditions,
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
      change.client_secret_encrypted !== undefined ? change.client_secret_encrypted : current.client_secret_encrypted;
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
}

export function createOAuthProviderService({
  db,
  secretBox,
  allowInsecure,
  client,
  publicUrl,
}: OAuthProviderServiceDeps) {
  const completeMcpProvider = createMcpDiscovery({ secretBox, client, publicUrl });
  const checkUrls = (settings: Partial<ProviderSettings>) => checkRules(settings, allowInsecure);
  const settingsOf = (input: ProviderInput) => inputSettings(input, secretBox);

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

    update: (actor: ProviderActor, ref: string, input: ProviderInput, conditions: WriteConditions = {}) =>
      changeProvider({ db, completeMcpProvider, checkUrls, settingsOf, mustFind }, actor, ref, input, conditions),

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
