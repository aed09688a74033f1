/**
 * A real OAuth 2.0 / OpenID Connect provider (the `oidc-provider` package) on loopback, for tests that
 * drive the authorization-code flow over HTTP. Fake only what is outside: this is
 * the identity provider; the service talks to it exactly as it would to a real one.
 *
 * What it offers: three clients (client_secret_post, client_secret_basic, and a public client with
 * PKCE) registered for the caller's redirect URIs; authorization code with PKCE S256; refresh tokens
 * on every code exchange; revocation and introspection endpoints; an access-token lifetime the test
 * sets; and switches that make the token endpoint fail. `FakeBrowser` plays the person: it follows
 * the redirects, signs in, approves or denies consent, and hands back the callback URL uncalled.
 *
 * @example
 * const idp = await startOidcServer({ redirectUris: ['http://slipway.test/v2/auth/callback/acme'] });
 * const callbackUrl = await authorizeInBrowser(pending.url, { login: 'alice' });
 * // ...call the service's callback with callbackUrl, then:
 * await idp.close();
 */

import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

export type TestClientKind = 'confidential' | 'confidentialBasic' | 'public';

export interface OidcTestClient {
  client_id: string;
  /** Null for the public client. */
  client_secret: string | null;
  token_endpoint_auth_method: 'client_secret_post' | 'client_secret_basic' | 'none';
  redirect_uris: string[];
}

/** How the token endpoint misbehaves while a failure is set. */
export type TokenEndpointFailure =
  /** The connection is closed without an answer, as when the provider is down mid-request. */
  | 'connection_reset'
  /** HTTP 500 with an HTML page, as from a broken proxy in front of the provider. */
  | 'http_500'
  /** HTTP 400 with an OAuth error body (`invalid_request`), as from a provider that rejects the client's request. */
  | 'oauth_error'
  /** HTTP 200 whose body is not JSON. */
  | 'malformed_json';

export interface OidcServerOptions {
  /** Redirect URIs registered for every client, e.g. `<publicUrl>/v2/auth/callback/<provider_id>`. */
  redirectUris: readonly string[];
  /** Lifetime of issued access tokens. Default 3600; `setAccessTokenTtl` changes it later. */
  accessTokenTtlSeconds?: number;
  /** Scopes the provider knows besides openid, offline_access, profile and email. */
  extraScopes?: readonly string[];
  /**
   * As an MCP server's authorization server: open dynamic client registration (RFC 7591, at
   * `/reg`) and resource indicators (RFC 8707): an authorization that names a `resource` gets an access
   * token whose audience is that resource (with the scope `mcp:tools`), which introspection reports.
   */
  mcp?: boolean;
}

/** A provider as the service's provider model sees it (snake_case, like the create request body). */
export interface TestProviderConfig {
  issuer: string;
  auth_url: string;
  token_url: string;
  revocation_url: string;
  client_id: string;
  client_secret: string | null;
  token_endpoint_auth_method: OidcTestClient['token_endpoint_auth_method'];
  uses_pkce: boolean;
  code_challenge_method: 'S256';
  scopes: string[];
}

export interface OidcServer {
  /** The issuer identifier, also the base URL, e.g. `http://127.0.0.1:41234`. */
  issuer: string;
  url: string;
  endpoints: {
    discovery: string;
    authorization: string;
    token: string;
    revocation: string;
    introspection: string;
    userinfo: string;
  };
  clients: Record<TestClientKind, OidcTestClient>;
  /** The scopes a client may ask for. */
  scopes: string[];
  /** The provider config for one of the clients, ready for the OAuth client or the service's create body. */
  providerConfig(kind: TestClientKind, overrides?: Partial<TestProviderConfig>): TestProviderConfig;
  /** Lifetime of access tokens issued from now on. */
  setAccessTokenTtl(seconds: number): void;
  /** Makes the token endpoint fail until called with null. Other endpoints keep working. */
  failTokenEndpoint(failure: TokenEndpointFailure | null): void;
  /** Requests that reached the token endpoint so far (failed ones included). */
  tokenRequestCount(): number;
  /** Makes the token endpoint answer only after `ms` (0: at once), like a provider under load. */
  delayTokenEndpoint(ms: number): void;
  /** Makes the revocation endpoint answer only after `ms` (0: at once). */
  delayRevocationEndpoint(ms: number): void;
  /**
   * Holds every request to the token (`/token`) or revocation endpoint from now on, unanswered, until
   * the returned release is called: a provider as slow as a test needs, with no clock involved.
   */
  holdEndpoint(endpoint: 'token' | 'revocation'): () => void;
  /** Requests held by holdEndpoint now, not answered yet. */
  heldRequestCount(): number;
  /** Requests that reached the revocation endpoint so far. */
  revocationRequestCount(): number;
  /** Asks the introspection endpoint (as the confidential client) whether a token is still active. */
  introspect(token: string): Promise<{ active: boolean } & Record<string, unknown>>;
  /** Calls the userinfo endpoint with an access token: what a resource server would answer. */
  userinfo(accessToken: string): Promise<{ status: number; body: Record<string, unknown> | null }>;
  close(): Promise<void>;
}

const BASE_SCOPES = ['openid', 'offline_access', 'profile', 'email'];

export async function startOidcServer(options: OidcServerOptions): Promise<OidcServer> {
  let accessTokenTtl = options.accessTokenTtlSeconds ?? 3600;
  let failure: TokenEndpointFailure | null = null;
  let tokenRequests = 0;
  let revocationRequests = 0;
  let tokenDelayMs = 0;
  let revocationDelayMs = 0;
  const holding = new Map<string, (() => void)[]>();
  let handle: ((req: http.IncomingMessage, res: http.ServerResponse) => void) | null = null;

  // Listen first: the issuer must carry the port, and the provider is built with its issuer.
  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const answer = () => {
      if (path === '/token' && failure) return failTokenRequest(failure, req, res);
      if (!handle) {
        res.writeHead(503).end();
        return;
      }
      handle(req, res);
    };
    let delayMs = 0;
    if (path === '/token') {
      tokenRequests += 1;
      delayMs = tokenDelayMs;
    } else if (path === '/token/revocation') {
      revocationRequests += 1;
      delayMs = revocationDelayMs;
    }
    // The request body is read by the provider after the delay; it waits in the socket meanwhile.
    const held = holding.get(path);
    if (held) held.push(answer);
    else if (delayMs > 0) setTimeout(answer, delayMs);
    else answer();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const issuer = `http://127.0.0.1:${port}`;

  const redirectUris = [...options.redirectUris];
  const secret = () => randomBytes(24).toString('base64url');
  const clients: Record<TestClientKind, OidcTestClient> = {
    confidential: {
      client_id: 'slipway-confidential',
      client_secret: secret(),
      token_endpoint_auth_method: 'client_secret_post',
      redirect_uris: redirectUris,
    },
    confidentialBasic: {
      client_id: 'slipway-confidential-basic',
      client_secret: secret(),
      token_endpoint_auth_method: 'client_secret_basic',
      redirect_uris: redirectUris,
    },
    public: {
      client_id: 'slipway-public',
      client_secret: null,
      token_endpoint_auth_method: 'none',
      redirect_uris: redirectUris,
    },
  };
  const scopes = [...new Set([...BASE_SCOPES, ...(options.extraScopes ?? []), ...(options.mcp ? ['mcp:tools'] : [])])];

  const provider = new Provider(issuer, {
    clients: Object.values(clients).map((client) => ({
      client_id: client.client_id,
      ...(client.client_secret ? { client_secret: client.client_secret } : {}),
      token_endpoint_auth_method: client.token_endpoint_auth_method,
      redirect_uris: client.redirect_uris,
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    })),
    scopes,
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
    },
    // The ID token carries email and name, so the service can label the account without userinfo.
    conformIdTokenClaims: false,
    // Any login name is an account; its e-mail is derived so tests can assert the label.
    findAccount: async (_ctx: unknown, sub: string) => ({
      accountId: sub,
      claims: async () => ({
        sub,
        email: `${sub}@example.test`,
        email_verified: true,
        name: sub,
        preferred_username: sub,
      }),
    }),
    // Refresh tokens on every code exchange: oidc-provider would otherwise drop offline_access unless
    // the request also carries prompt=consent, which is not what most providers require.
    issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed(type: string): boolean }) =>
      client.grantTypeAllowed('refresh_token'),
    pkce: { required: () => false },
    // The provider and the service share one clock here; the default 15 s tolerance would keep an
    // expired access token working at userinfo and make expiry slow to observe.
    clockTolerance: 0,
    features: {
      ...(options.mcp
        ? {
            registration: { enabled: true },
            resourceIndicators: {
              enabled: true,
              defaultResource: async (_ctx: unknown, _client: unknown, oneOf?: string[]) => oneOf?.[0] ?? undefined,
              useGrantedResource: async () => true,
              getResourceServerInfo: async (_ctx: unknown, resourceIndicator: string) => ({
                scope: 'mcp:tools',
                audience: resourceIndicator,
                accessTokenFormat: 'opaque',
              }),
            },
          }
        : {}),
      devInteractions: { enabled: true },
      revocation: { enabled: true, allowedPolicy: async () => true },
      introspection: { enabled: true, allowedPolicy: async () => true },
    },
    ttl: {
      AccessToken: () => accessTokenTtl,
      AuthorizationCode: 60,
      RefreshToken: 24 * 60 * 60,
      IdToken: 60 * 60,
      Interaction: 10 * 60,
      Session: 60 * 60,
      Grant: 24 * 60 * 60,
    },
    cookies: { keys: [secret()] },
  });
  handle = provider.callback();

  const endpoints = {
    discovery: `${issuer}/.well-known/openid-configuration`,
    authorization: `${issuer}/auth`,
    token: `${issuer}/token`,
    revocation: `${issuer}/token/revocation`,
    introspection: `${issuer}/token/introspection`,
    userinfo: `${issuer}/me`,
  };

  return {
    issuer,
    url: issuer,
    endpoints,
    clients,
    scopes,
    providerConfig(kind, overrides = {}) {
      const client = clients[kind];
      return {
        issuer,
        auth_url: endpoints.authorization,
        token_url: endpoints.token,
        revocation_url: endpoints.revocation,
        client_id: client.client_id,
        client_secret: client.client_secret,
        token_endpoint_auth_method: client.token_endpoint_auth_method,
        uses_pkce: true,
        code_challenge_method: 'S256',
        scopes: ['openid', 'offline_access', 'email', 'profile'],
        ...overrides,
      };
    },
    setAccessTokenTtl(seconds) {
      accessTokenTtl = seconds;
    },
    failTokenEndpoint(next) {
      failure = next;
    },
    tokenRequestCount: () => tokenRequests,
    delayTokenEndpoint(ms) {
      tokenDelayMs = ms;
    },
    delayRevocationEndpoint(ms) {
      revocationDelayMs = ms;
    },
    revocationRequestCount: () => revocationRequests,
    holdEndpoint(endpoint) {
      const path = endpoint === 'token' ? '/token' : '/token/revocation';
      const held: (() => void)[] = [];
      holding.set(path, held);
      return () => {
        if (holding.get(path) === held) holding.delete(path);
        for (const answer of held.splice(0)) answer();
      };
    },
    heldRequestCount: () => [...holding.values()].reduce((n, held) => n + held.length, 0),
    async introspect(token) {
      const client = clients.confidential;
      const response = await fetch(endpoints.introspection, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token, client_id: client.client_id, client_secret: client.client_secret ?? '' }),
      });
      if (!response.ok) throw new Error(`introspection answered HTTP ${response.status}`);
      return (await response.json()) as { active: boolean } & Record<string, unknown>;
    },
    async userinfo(accessToken) {
      const response = await fetch(endpoints.userinfo, { headers: { authorization: `Bearer ${accessToken}` } });
      const body = response.headers.get('content-type')?.includes('json')
        ? ((await response.json()) as Record<string, unknown>)
        : null;
      return { status: response.status, body };
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

function failTokenRequest(failure: TokenEndpointFailure, req: http.IncomingMessage, res: http.ServerResponse): void {
  switch (failure) {
    case 'connection_reset':
      req.socket.destroy();
      return;
    case 'http_500':
      res.writeHead(500, { 'content-type': 'text/html' }).end('<h1>Internal Server Error</h1>');
      return;
    case 'oauth_error':
      res.writeHead(400, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          error: 'invalid_request',
          error_description: 'the token endpoint refuses every request in this test',
        }),
      );
      return;
    case 'malformed_json':
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"access_token": ');
      return;
  }
}

/** A URL on loopback where nothing listens: a port taken, then released. */
export async function unreachableUrl(path = '/token'): Promise<string> {
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return `http://127.0.0.1:${port}${path}`;
}

export interface BrowserAuthorizeOptions {
  /** The account name typed into the sign-in form. Default `alice`. */
  login?: string;
  /** What the person does on the consent page. Default `approve`. */
  consent?: 'approve' | 'deny';
}

interface StoredCookie {
  name: string;
  value: string;
  path: string;
}

/**
 * A person's browser against the fake provider, over plain HTTP with a small cookie jar. One instance
 * keeps the provider session between authorizations, like a real browser.
 */
export class FakeBrowser {
  readonly #cookies = new Map<string, StoredCookie>();

  /**
   * Opens the authorization URL and goes through sign-in and consent. Returns the URL the provider
   * finally redirects to outside itself (the service's callback with `code` and `state`, or with
   * `error=access_denied`) without requesting it.
   */
  async authorize(authorizationUrl: string, options: BrowserAuthorizeOptions = {}): Promise<string> {
    const login = options.login ?? 'alice';
    const decision = options.consent ?? 'approve';
    let url = new URL(authorizationUrl);
    const providerOrigin = url.origin;
    let form: URLSearchParams | null = null;

    for (let step = 0; step < 20; step += 1) {
      const response = await this.#request(url, form);
      form = null;

      if (response.status >= 300 && response.status < 400) {
        const location = response.headers.get('location');
        if (!location) throw new Error(`The provider answered HTTP ${response.status} without a Location`);
        const next = new URL(location, url);
        if (next.origin !== providerOrigin) return next.href;
        url = next;
        continue;
      }

      const html = await response.text();
      if (response.status !== 200) {
        throw new Error(`The provider answered HTTP ${response.status}: ${pageText(html)}`);
      }
      const prompt = /name="prompt" value="([a-z]+)"/.exec(html)?.[1];
      const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1];
      if (!prompt || !action) throw new Error(`The provider showed an unexpected page: ${pageText(html)}`);

      if (prompt === 'login') {
        url = new URL(decodeEntities(action), url);
        form = new URLSearchParams({ prompt: 'login', login, password: 'any password' });
      } else if (prompt === 'consent' && decision === 'deny') {
        const abort = /<a href="([^"]+\/abort)"/.exec(html)?.[1];
        if (!abort) throw new Error('The consent page has no cancel link');
        url = new URL(decodeEntities(abort), url);
      } else if (prompt === 'consent') {
        url = new URL(decodeEntities(action), url);
        form = new URLSearchParams({ prompt: 'consent' });
      } else {
        throw new Error(`The provider asked for an unknown prompt ${prompt}`);
      }
    }
    throw new Error('The provider kept redirecting (more than 20 steps)');
  }

  async #request(url: URL, form: URLSearchParams | null): Promise<Response> {
    const cookie = [...this.#cookies.values()]
      .filter((c) => url.pathname === c.path || url.pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`))
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
    const headers: Record<string, string> = {};
    if (cookie) headers.cookie = cookie;
    if (form) headers['content-type'] = 'application/x-www-form-urlencoded';
    const response = await fetch(url, {
      method: form ? 'POST' : 'GET',
      headers,
      body: form ?? undefined,
      redirect: 'manual',
    });
    for (const line of response.headers.getSetCookie()) this.#store(line);
    return response;
  }

  #store(setCookie: string): void {
    const [pair = '', ...attributes] = setCookie.split(';').map((part) => part.trim());
    const eq = pair.indexOf('=');
    if (eq <= 0) return;
    const name = pair.slice(0, eq);
    const value = pair.slice(eq + 1);
    let path = '/';
    let expired = value === '';
    for (const attribute of attributes) {
      const [key = '', val = ''] = attribute.split('=');
      if (key.toLowerCase() === 'path' && val) path = val;
      if (key.toLowerCase() === 'expires' && Date.parse(val) <= Date.now()) expired = true;
      if (key.toLowerCase() === 'max-age' && Number(val) <= 0) expired = true;
    }
    const key = `${name}|${path}`;
    if (expired) this.#cookies.delete(key);
    else this.#cookies.set(key, { name, value, path });
  }
}

/** One authorization in a fresh browser: sign in as `login`, approve or deny, return the callback URL. */
export function authorizeInBrowser(authorizationUrl: string, options: BrowserAuthorizeOptions = {}): Promise<string> {
  return new FakeBrowser().authorize(authorizationUrl, options);
}

function decodeEntities(text: string): string {
  return text
    .replace(/&amp;/g, '&')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&#x2F;/gi, '/');
}

/** The visible text of an error page, shortened, for a failing test's message. */
function pageText(html: string): string {
  const body = html.includes('<body') ? html.slice(html.indexOf('<body')) : html;
  return body
    .replace(/<[^>]*>/g, ' ')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, 300);
}
