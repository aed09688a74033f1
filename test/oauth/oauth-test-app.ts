/**
 * Helpers for the OAuth service tests: the app on a fresh database with every log line captured (to
 * assert that no secret reaches a log), a fake identity provider whose clients accept the service's
 * callback URLs, and the steps of the flow as a person and an agent take them, all over HTTP.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { newCredential } from '../../src/auth/credentials.ts';
import type { SecretBox } from '../../src/crypto/secret-box.ts';
import { createApiKey, createOrganization, createWorkspace } from '../../src/store/tenancy.ts';
import { authorizeInBrowser, startOidcServer, type OidcServer, type TestClientKind } from '../fakes/oidc-server.ts';
import { createTestClock, type TestClock } from '../support/clock.ts';
import { buildReplicaApp, client, createTestApp, type TestDatabase } from '../support/harness.ts';

/** Where browsers reach the service. It is never requested: the fake browser hands the callback URL back. */
export const PUBLIC_URL = 'http://slipway.test';

/** The provider slugs the tests use; each needs its callback registered at the fake provider. */
export const SLUGS = ['acme-idp', 'public-idp', 'basic-idp', 'down-idp', 'plain-idp', 'other-idp'] as const;

export const callbackFor = (slug: string): string => `${PUBLIC_URL}/v2/auth/callback/${slug}`;

export function startIdp(): Promise<OidcServer> {
  return startOidcServer({ redirectUris: SLUGS.map(callbackFor), extraScopes: ['repo:read'] });
}

export interface OAuthTestApp {
  app: FastifyInstance;
  database: TestDatabase;
  secretBox: SecretBox;
  workspaceId: string;
  organizationId: string;
  /** The first-start organization admin key. */
  orgKey: string;
  /** Every log line the app wrote, at trace level. */
  logs: string[];
  /** The app's clock for OAuth token expiry: `advance` it to let a token expire. */
  clock: TestClock;
  /** Another app on the same database and key: a second replica of the service. Closed with this one. */
  replica(): Promise<FastifyInstance>;
  close(): Promise<void>;
}

export async function startOAuthTestApp(
  env: Record<string, string> = { SLIPWAY_ALLOW_INSECURE_OAUTH: '1' },
): Promise<OAuthTestApp> {
  const logs: string[] = [];
  const logger = pino({ level: 'trace' }, { write: (line: string) => void logs.push(line) });
  const clock = createTestClock();
  const t = await createTestApp(
    { SLIPWAY_PUBLIC_URL: PUBLIC_URL, LOG_LEVEL: 'trace', ...env },
    { logger, now: clock.now },
  );
  const replicas: FastifyInstance[] = [];
  return {
    app: t.app,
    database: t.database,
    secretBox: t.secretBox,
    workspaceId: t.workspaceId,
    organizationId: t.organizationId,
    orgKey: t.orgKey,
    logs,
    clock,
    async replica() {
      const other = await buildReplicaApp(t, { logger });
      replicas.push(other);
      return other;
    },
    async close() {
      for (const other of replicas) await other.close();
      await t.close();
    },
  };
}

export type Api = ReturnType<typeof client>;

/** A second organization with its own workspace and admin key: nothing of the first is visible to it. */
export async function otherOrganization(
  t: OAuthTestApp,
): Promise<{ key: string; organizationId: string; workspaceId: string }> {
  const organization = await createOrganization(t.database.db, `other-${randomBytes(3).toString('hex')}`);
  const workspace = await createWorkspace(t.database.db, organization.id, 'main');
  const { value: key, hash: keyHash, prefix: keyPrefix } = newCredential('apiKey');
  await createApiKey(t.database.db, {
    organizationId: organization.id,
    // An organization admin key: it may register the other organization's providers too.
    workspaceId: null,
    name: 'other admin',
    role: 'admin',
    hash: keyHash,
    prefix: keyPrefix,
  });
  return { key, organizationId: organization.id, workspaceId: workspace.id };
}

/** Registers one of the fake provider's clients under `slug`; returns the created provider. */
export async function registerProvider(
  api: Api,
  idp: OidcServer,
  kind: TestClientKind,
  slug: string,
  overrides: Record<string, unknown> = {},
) {
  const config = idp.providerConfig(kind);
  const res = await api.post('/v2/auth/providers', {
    provider_id: slug,
    name: `Test IdP (${kind})`,
    ...config,
    ...overrides,
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body;
}

/** POST /v2/auth/authenticate expecting pending. */
export async function startAuthorization(
  api: Api,
  body: Record<string, unknown>,
): Promise<{ auth_id: string; url: string }> {
  const res = await api.post('/v2/auth/authenticate', body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.status, 'pending', JSON.stringify(res.body));
  return res.body;
}

/** Lands the browser on the service's callback (the provider's redirect), as inject. */
export async function openCallback(
  app: FastifyInstance,
  callbackUrl: string,
): Promise<{ status: number; html: string; headers: Record<string, unknown> }> {
  const url = new URL(callbackUrl);
  assert.equal(url.origin, PUBLIC_URL);
  const res = await app.inject({ method: 'GET', url: url.pathname + url.search });
  return { status: res.statusCode, html: res.body, headers: res.headers };
}

/** The whole flow as a person: authenticate, sign in and approve at the provider, land on the callback, wait. */
export async function authorize(t: OAuthTestApp, api: Api, body: Record<string, unknown>, login = 'alice') {
  const pending = await startAuthorization(api, body);
  const callbackUrl = await authorizeInBrowser(pending.url, { login });
  const page = await openCallback(t.app, callbackUrl);
  assert.equal(page.status, 200, page.html);
  const waited = await api.get(`/v2/auth/wait/${pending.auth_id}?timeout=5`);
  assert.equal(waited.status, 200);
  assert.equal(waited.body.status, 'completed', JSON.stringify(waited.body));
  return {
    authId: pending.auth_id,
    callbackUrl,
    page,
    tokenId: waited.body.token_id as string,
    connectionId: waited.body.connection_id as string | null,
  };
}

/** The stored token values, opened: what must never appear in a response or a log. */
export async function storedTokenValues(
  t: OAuthTestApp,
  tokenId: string,
): Promise<{ access: string; refresh: string | null }> {
  const row = await t.database.db
    .selectFrom('oauth_tokens')
    .select(['access_token_encrypted', 'refresh_token_encrypted'])
    .where('id', '=', tokenId)
    .executeTakeFirstOrThrow();
  return {
    access: t.secretBox.open(row.access_token_encrypted),
    refresh: row.refresh_token_encrypted === null ? null : t.secretBox.open(row.refresh_token_encrypted),
  };
}

export function assertNoSecrets(where: string, text: string, secrets: ReadonlyArray<string | null | undefined>): void {
  for (const secret of secrets) {
    if (secret) assert.ok(!text.includes(secret), `${where} contains a secret value`);
  }
}

/** A deployment to mint agent credentials for. */
export async function createDeployment(api: Api, name: string): Promise<string> {
  const res = await api.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/agent:1' },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id;
}

/** POST .../token as a deployed agent with its credential. */
export async function agentToken(
  app: FastifyInstance,
  credential: string | null,
  agentId: string,
  connectionId: string,
) {
  const res = await app.inject({
    method: 'POST',
    url: `/v2/auth/agents/${encodeURIComponent(agentId)}/connections/${connectionId}/token`,
    headers: credential ? { authorization: `Bearer ${credential}` } : {},
  });
  return {
    status: res.statusCode,
    body: JSON.parse(res.body) as Record<string, unknown> & { access_token?: string; detail?: string },
    headers: res.headers,
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
