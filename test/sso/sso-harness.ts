/**
 * Single sign-on under test: a real OpenID provider (the `oidc-provider` package) on loopback whose
 * accounts carry e-mail addresses and groups, and the service set up to sign people in through it.
 * Fake only what is outside: the provider is a real one, the service talks to it as to Okta or Keycloak.
 *
 * `signIn` plays a person's browser over plain HTTP: POST /v2/sso/login (the state cookie), the
 * provider's sign-in and consent (FakeBrowser), then the service's callback with that cookie.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';
import { FakeBrowser } from '../fakes/oidc-server.ts';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../../src/config.ts';
import type { SecretBox } from '../../src/crypto/secret-box.ts';
import type { FetchLike } from '../../src/sso/oidc-client.ts';
import { ADMIN_KEY, createTestApp, freePort, type TestAppOptions, type TestDatabase } from '../support/harness.ts';

export interface TestAccount {
  email?: string | null;
  email_verified?: boolean;
  groups?: string[];
}

export interface SsoProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  tokenEndpoint: string;
  /** Accounts by login name; a login not listed is `<login>@example.test`, verified, in no group. */
  accounts: Map<string, TestAccount>;
  close(): Promise<void>;
}

export async function startSsoProvider(redirectUris: string[]): Promise<SsoProvider> {
  let handle: ((req: http.IncomingMessage, res: http.ServerResponse) => void) | null = null;
  const server = http.createServer((req, res) => (handle ? handle(req, res) : res.writeHead(503).end()));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clientId = 'slipway-dashboard';
  const clientSecret = randomBytes(24).toString('base64url');
  const accounts = new Map<string, TestAccount>();
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        token_endpoint_auth_method: 'client_secret_basic',
        redirect_uris: redirectUris,
        grant_types: ['authorization_code'],
        response_types: ['code'],
      },
    ],
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name'],
      groups: ['groups'],
    },
    // The claims go into the ID token, as Okta, Keycloak and Dex put groups there.
    conformIdTokenClaims: false,
    findAccount: async (_ctx: unknown, sub: string) => ({
      accountId: sub,
      claims: async () => {
        const account = accounts.get(sub) ?? {};
        return {
          sub,
          email: account.email === undefined ? `${sub}@example.test` : account.email,
          email_verified: account.email_verified ?? true,
          name: sub,
          groups: account.groups ?? [],
        };
      },
    }),
    pkce: { required: () => true },
    features: { devInteractions: { enabled: true } },
    ttl: { AuthorizationCode: 60, IdToken: 3600, AccessToken: 3600, Interaction: 600, Session: 3600, Grant: 3600 },
    cookies: { keys: [randomBytes(24).toString('base64url')] },
  });
  handle = provider.callback();
  return {
    issuer,
    clientId,
    clientSecret,
    tokenEndpoint: `${issuer}/token`,
    accounts,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

export interface SsoTestApp {
  app: FastifyInstance;
  database: TestDatabase;
  config: Config;
  workspaceId: string;
  organizationId: string;
  /** The first-start organization admin key. */
  orgKey: string;
  /** A workspace admin key of the first workspace. */
  adminKey: string;
  close(): Promise<void>;
  provider: SsoProvider;
  /** The service's SecretBox: a test opens and seals state cookies with it, as the service does. */
  secretBox: SecretBox;
  /** The service's public URL: where the browser reaches it, and the only origin its cookie writes come from. */
  publicUrl: string;
  port: number;
}

export interface SsoTestOptions {
  /** Replaces fetch towards the provider, to play one that answers wrongly. */
  ssoFetch?: FetchLike;
  env?: Record<string, string>;
  /** The service's clock (test/support/clock.ts), for a test that moves time past a session's expiry. */
  now?: TestAppOptions['now'];
}

/** The service with single sign-on through a fresh provider; listening is up to the test (port is free). */
export async function createSsoTestApp(options: SsoTestOptions = {}): Promise<SsoTestApp> {
  const port = await freePort();
  const publicUrl = `http://127.0.0.1:${port}`;
  const provider = await startSsoProvider([`${publicUrl}/v2/sso/callback`, `http://localhost:${port}/v2/sso/callback`]);
  // `{port}` in a value is the service's port (known only here).
  const env = Object.fromEntries(
    Object.entries(options.env ?? {}).map(([k, v]) => [k, v.replace('{port}', String(port))]),
  );
  const t = await createTestApp(
    {
      PORT: String(port),
      SLIPWAY_PUBLIC_URL: publicUrl,
      SLIPWAY_ALLOW_INSECURE_OAUTH: '1',
      SLIPWAY_SSO_ISSUER: provider.issuer,
      SLIPWAY_SSO_CLIENT_ID: provider.clientId,
      SLIPWAY_SSO_CLIENT_SECRET: provider.clientSecret,
      SLIPWAY_SSO_SCOPES: 'openid email profile groups',
      SLIPWAY_SSO_PROVIDER_NAME: 'Test IdP',
      ...env,
    },
    { ...(options.ssoFetch ? { ssoFetch: options.ssoFetch } : {}), ...(options.now ? { now: options.now } : {}) },
  );
  return {
    app: t.app,
    database: t.database,
    config: t.config,
    workspaceId: t.workspaceId,
    organizationId: t.organizationId,
    orgKey: t.orgKey,
    adminKey: ADMIN_KEY,
    provider,
    secretBox: t.secretBox,
    publicUrl: t.config.publicUrl,
    port,
    async close() {
      await t.close();
      await provider.close();
    },
  };
}

/** The value of a cookie in Set-Cookie headers, and the whole line. */
export function cookieFrom(
  setCookie: string | string[] | number | undefined,
  name: string,
): { value: string; line: string } | null {
  const lines = Array.isArray(setCookie) ? setCookie : typeof setCookie === 'string' ? [setCookie] : [];
  for (const line of lines) {
    const [pair = ''] = line.split(';');
    const eq = pair.indexOf('=');
    if (pair.slice(0, eq).trim() === name) return { value: decodeURIComponent(pair.slice(eq + 1)), line };
  }
  return null;
}

export interface SignInAttempt {
  /** The state cookie the service set at the start (the sign-in, sealed). */
  state: string;
  /** The provider's redirect back to the service (path and query), not yet requested. */
  callbackPath: string;
}

/** Steps 1 and 2: start a sign-in and go through the provider as `login`. */
export async function startSignIn(t: SsoTestApp, login: string, returnTo?: string): Promise<SignInAttempt> {
  const start = await t.app.inject({
    method: 'POST',
    url: '/v2/sso/login',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify(returnTo === undefined ? {} : { return_to: returnTo }),
  });
  if (start.statusCode !== 200) throw new Error(`POST /v2/sso/login answered ${start.statusCode}: ${start.body}`);
  const state = cookieFrom(start.headers['set-cookie'], 'slipway_sso_state');
  if (state === null) throw new Error('POST /v2/sso/login set no state cookie');
  const callback = new URL(await new FakeBrowser().authorize(start.json<{ url: string }>().url, { login }));
  return { state: state.value, callbackPath: callback.pathname + callback.search };
}

/** Step 3: the browser follows the provider's redirect to the service, with the state cookie it holds. */
export async function finishSignIn(
  t: SsoTestApp,
  callbackPath: string,
  stateCookie: string | null,
  sessionCookie: string | null = null,
) {
  const cookies = [
    ...(stateCookie === null ? [] : [`slipway_sso_state=${stateCookie}`]),
    ...(sessionCookie === null ? [] : [`slipway_session=${sessionCookie}`]),
  ];
  const response = await t.app.inject({
    method: 'GET',
    url: callbackPath,
    headers: cookies.length === 0 ? {} : { cookie: cookies.join('; ') },
  });
  const session = cookieFrom(response.headers['set-cookie'], 'slipway_session');
  return {
    status: response.statusCode,
    page: response.body,
    setCookie: response.headers['set-cookie'],
    session: session !== null && session.value !== '' ? session.value : null,
    sessionLine: session?.line ?? null,
  };
}

export async function signIn(t: SsoTestApp, login: string) {
  const attempt = await startSignIn(t, login);
  return finishSignIn(t, attempt.callbackPath, attempt.state);
}

/** A request as the dashboard makes it with the session cookie (same origin: Origin on writes). */
export async function asPerson(
  t: SsoTestApp,
  session: string,
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE',
  url: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
) {
  const response = await t.app.inject({
    method,
    url,
    headers: {
      cookie: `slipway_session=${session}`,
      ...(method === 'GET' ? {} : { origin: t.publicUrl, 'sec-fetch-site': 'same-origin' }),
      ...(options.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...options.headers,
    },
    ...(options.body !== undefined ? { payload: JSON.stringify(options.body) } : {}),
  });
  return {
    status: response.statusCode,
    body: response.body === '' ? undefined : response.json(),
    headers: response.headers,
  };
}
