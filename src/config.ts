/**
 * The only reader of the environment. Every setting and its default lives here;
 * `loadConfig` validates once at start and fails fast with an error that names the variable.
 */
import path from 'node:path';
import { DEFAULT_LIMITS } from './dataplane/resource-limits.ts';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface Config {
  /** TCP port the HTTP API listens on. */
  readonly port: number;
  /** Interface the HTTP API binds to. */
  readonly host: string;
  /** External PostgreSQL; null means the embedded server under `dataDir`. */
  readonly databaseUrl: string | null;
  /** Where the embedded database, the key file and app builds live (uploaded sources are in the database). */
  readonly dataDir: string;
  /** When set, an admin key with exactly this value exists for the default workspace. */
  readonly bootstrapApiKey: string | null;
  /** 32-byte key for secrets at rest; null means a key file generated in `dataDir` (embedded database only). */
  readonly encryptionKey: Buffer | null;
  /** During a key rotation: the key being replaced, which still opens (never seals) values. */
  readonly previousEncryptionKey: Buffer | null;
  readonly logLevel: LogLevel;
  /** Largest JSON request body accepted, in bytes. */
  readonly bodyLimitBytes: number;
  /** Largest source tarball accepted by the upload endpoint, in bytes. */
  readonly uploadLimitBytes: number;
  /** Plain-http OAuth endpoints, for development and tests only. */
  readonly allowInsecureOAuth: boolean;
  /** Plain-http code-host API URLs, for development and tests only. */
  readonly allowInsecureCodehost: boolean;
  /**
   * The code-host API URLs integrations may name, as normalized prefixes (origin plus path, no trailing
   * slash): an integration makes the service connect to its api_url, so only hosts the operator lists.
   */
  readonly codehostAllowedUrls: readonly string[];
  /** Address under which users and browsers reach this service (OAuth redirects, webhooks). */
  readonly publicUrl: string;
  /** What this process does: serve the API, run the worker (the local data plane), or both. */
  readonly roles: readonly Role[];
  /** Revisions the worker builds or starts at once. */
  readonly workerConcurrency: number;
  /** Apps are reached at `<slug>.<appsDomain>` on the apps port, never on the API's origin. */
  readonly appsDomain: string;
  /** Interface and port the app edge listens on (0: a free port chosen at start). */
  readonly appsHost: string;
  readonly appsPort: number;
  /**
   * Scheme and port under which users reach apps when that differs from what the edge listens on (a
   * load balancer in front of it): `https://<appsDomain>`; null derives it from the edge itself.
   */
  readonly appsPublicUrl: string | null;
  /** Certificate and key (PEM files) for the apps domain: the edge then serves HTTPS. */
  readonly appsTls: { readonly certFile: string; readonly keyFile: string } | null;
  /** Which proxy serves app traffic: HAProxy when installed (`auto`), HAProxy or nothing, or the built-in one. */
  readonly edgeProxy: EdgeProxyMode;
  /** How apps are isolated: `auto` uses bubblewrap when installed, `bwrap` requires it, `none` runs them bare. */
  readonly sandbox: SandboxMode;
  /**
   * Limits of an app instance whose resource_spec is silent (and the least a build gets): memory in
   * bytes, CPU in cores, processes.
   */
  readonly defaultLimits: { readonly memoryBytes: number; readonly cpu: number; readonly pids: number };
  /** How long a new revision's health path has to answer 2xx before DEPLOY_FAILED. */
  readonly healthTimeoutMs: number;
  /** How long old instances get to finish their requests after a switch (and after SIGTERM). */
  readonly drainTimeoutMs: number;
  /** Lines of log kept per revision and type (build output stops there; app output keeps the newest). */
  readonly logMaxLines: number;
  /** Events older than this many days are pruned; 0 keeps them forever. */
  readonly eventRetentionDays: number;
  /** Uploads that no revision uses are removed once this many hours old. */
  readonly uploadRetentionHours: number;
  /** Streams (followed logs) and long-polls one API key or listener credential may hold open at once. */
  readonly streamsPerKey: number;
  /** Streams and long-polls one client address may hold open at once, whatever the keys. */
  readonly streamsPerAddress: number;
  /** When set, GET /metrics needs `Authorization: Bearer <this>`; null leaves it open. */
  readonly metricsToken: string | null;
  /** Dashboard sign-in through an OpenID Connect provider (docs/operations.md, "Single sign-on"); null: off. */
  readonly sso: SsoConfig | null;
  /** OpenTelemetry traces over OTLP/HTTP (docs/operations.md, "Traces"); null: no traces are made. */
  readonly tracing: TracingConfig | null;
}

export interface TracingConfig {
  /** Where spans are sent: `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. */
  readonly tracesUrl: string;
  /** OTEL_EXPORTER_OTLP_ENDPOINT as given, for apps (they add /v1/traces themselves); null when only the traces URL was set. */
  readonly endpoint: string | null;
  /** OTEL_EXPORTER_OTLP_HEADERS, sent with every export (a collector's token). */
  readonly headers: Readonly<Record<string, string>>;
  /** OTEL_SERVICE_NAME, default `slipway`. */
  readonly serviceName: string;
}

export interface SsoConfig {
  /** The provider's issuer identifier; its metadata is read from `<issuer>/.well-known/openid-configuration`. */
  readonly issuer: string;
  readonly clientId: string;
  /** Null: a public client (PKCE alone binds the code to the sign-in). */
  readonly clientSecret: string | null;
  /** Always with `openid`. */
  readonly scopes: readonly string[];
  /** The ID token claim that lists the person's groups. */
  readonly groupsClaim: string;
  /** How long a session lasts from sign-in. */
  readonly sessionTtlMs: number;
  /** What the sign-in button calls the provider. */
  readonly providerName: string;
}

export type Role = 'api' | 'worker';
export type SandboxMode = 'auto' | 'bwrap' | 'none';
export type EdgeProxyMode = 'auto' | 'haproxy' | 'builtin';

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function text(env: Env, name: string): string | null {
  const value = env[name];
  return value === undefined || value.trim() === '' ? null : value.trim();
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === null) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be an integer, got '${raw}'`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function decimal(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === null) return fallback;
  if (!/^\d+(\.\d+)?$/.test(raw)) throw new ConfigError(name, `must be a number such as 0.5 or 2, got '${raw}'`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function flag(env: Env, name: string): boolean {
  const raw = text(env, name);
  if (raw === null) return false;
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  throw new ConfigError(name, `must be 1 or 0 (true or false), got '${raw}'`);
}

function databaseUrl(env: Env): string | null {
  const raw = text(env, 'DATABASE_URL');
  if (raw === null) return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError('DATABASE_URL', 'is not a valid URL');
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new ConfigError('DATABASE_URL', `must start with postgres:// or postgresql://, got ${url.protocol}//`);
  }
  return raw;
}

function encryptionKey(env: Env, name: string): Buffer | null {
  const raw = text(env, name);
  if (raw === null) return null;
  const key = /^[0-9a-fA-F]{64}$/.test(raw) ? Buffer.from(raw, 'hex') : Buffer.from(raw, 'base64');
  if (key.length !== 32) {
    throw new ConfigError(name, 'must be 32 bytes, as 64 hex digits or base64');
  }
  return key;
}

/**
 * With DATABASE_URL the key must be given: replicas that each generated a key file of their own would
 * seal with different keys, and each could open only its own secrets.
 */
function requiredEncryptionKey(env: Env, databaseUrl: string | null): Buffer | null {
  const key = encryptionKey(env, 'SLIPWAY_ENCRYPTION_KEY');
  if (key === null && databaseUrl !== null) {
    throw new ConfigError(
      'SLIPWAY_ENCRYPTION_KEY',
      'is required with DATABASE_URL (the same key on every replica): generate one with `openssl rand -hex 32` and keep it with your database backups',
    );
  }
  return key;
}

/** Just DATABASE_URL, validated, for tools that need the database and nothing else (the bench). */
export function loadDatabaseUrl(env: Env = process.env): string | null {
  return databaseUrl(env);
}

function bootstrapApiKey(env: Env): string | null {
  const raw = text(env, 'SLIPWAY_BOOTSTRAP_API_KEY');
  if (raw === null) return null;
  if (raw.length < 16 || raw.length > 256 || !/^[\x21-\x7e]+$/.test(raw)) {
    throw new ConfigError('SLIPWAY_BOOTSTRAP_API_KEY', 'must be 16 to 256 printable characters without spaces');
  }
  return raw;
}

function logLevel(env: Env): LogLevel {
  const raw = text(env, 'LOG_LEVEL');
  if (raw === null) return 'info';
  const level = raw.toLowerCase() as LogLevel;
  if (!LOG_LEVELS.includes(level)) throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}`);
  return level;
}

function publicUrl(env: Env, host: string, port: number): string {
  const raw = text(env, 'SLIPWAY_PUBLIC_URL');
  if (raw === null) return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  try {
    const url = new URL(raw);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('protocol');
  } catch {
    throw new ConfigError('SLIPWAY_PUBLIC_URL', 'must be an http(s) URL');
  }
  return raw.replace(/\/+$/, '');
}

/**
 * SLIPWAY_CODEHOST_ALLOWED_URLS: comma-separated URL prefixes. Each is kept as origin plus path without
 * a trailing slash, the form api_url is stored in, so that matching compares like with like.
 */
function codehostAllowedUrls(env: Env): readonly string[] {
  const name = 'SLIPWAY_CODEHOST_ALLOWED_URLS';
  const raw = text(env, name);
  if (raw === null) return ['https://api.github.com'];
  const entries = raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  if (entries.length === 0)
    throw new ConfigError(name, 'names no URL; give comma-separated code-host API URLs such as https://api.github.com');
  return [
    ...new Set(
      entries.map((entry) => {
        let url: URL;
        try {
          url = new URL(entry);
        } catch {
          throw new ConfigError(name, `'${entry}' is not a URL`);
        }
        if (url.protocol !== 'https:' && url.protocol !== 'http:')
          throw new ConfigError(name, `'${entry}' must be an http(s) URL`);
        if (url.username !== '' || url.password !== '')
          throw new ConfigError(name, `'${entry}' must not carry credentials`);
        if (url.search !== '' || url.hash !== '')
          throw new ConfigError(name, `'${entry}' must not have a query or a fragment`);
        return `${url.origin}${url.pathname}`.replace(/\/+$/, '');
      }),
    ),
  ];
}

const ROLES: readonly Role[] = ['api', 'worker'];

function roles(env: Env): readonly Role[] {
  const raw = text(env, 'SLIPWAY_ROLES');
  if (raw === null) return ['api', 'worker'];
  const asked = raw
    .split(',')
    .map((r) => r.trim().toLowerCase())
    .filter((r) => r !== '');
  for (const role of asked) {
    if (!ROLES.includes(role as Role))
      throw new ConfigError('SLIPWAY_ROLES', `unknown role '${role}'; use api, worker or both (api,worker)`);
  }
  if (asked.length === 0) throw new ConfigError('SLIPWAY_ROLES', 'names no role; use api, worker or both (api,worker)');
  return [...new Set(asked as Role[])];
}

function appsDomain(env: Env): string {
  const raw = text(env, 'SLIPWAY_APPS_DOMAIN');
  if (raw === null) return 'localhost';
  const domain = raw.toLowerCase().replace(/\.$/, '');
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(domain)) {
    throw new ConfigError('SLIPWAY_APPS_DOMAIN', `must be a DNS domain such as apps.example.com, got '${raw}'`);
  }
  return domain;
}

function appsPort(env: Env, port: number): number {
  const chosen = integer(env, 'SLIPWAY_APPS_PORT', port === 0 ? 0 : port < 65535 ? port + 1 : port - 1, 0, 65535);
  if (chosen !== 0 && chosen === port)
    throw new ConfigError('SLIPWAY_APPS_PORT', `must differ from PORT (${port}): apps never share the API's origin`);
  return chosen;
}

/** An http(s) URL setting, parsed; null when unset. */
function httpUrl(env: Env, name: string, example: string): { raw: string; url: URL } | null {
  const raw = text(env, name);
  if (raw === null) return null;
  let url: URL | null = null;
  try {
    url = new URL(raw);
  } catch {
    // Said below.
  }
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new ConfigError(name, `must be an http(s) URL such as ${example}, got '${raw}'`);
  return { raw, url };
}

function appsPublicUrl(env: Env, domain: string): string | null {
  const name = 'SLIPWAY_APPS_PUBLIC_URL';
  const given = httpUrl(env, name, `https://${domain}`);
  if (given === null) return null;
  const { url } = given;
  if (url.hostname !== domain)
    throw new ConfigError(
      name,
      `its host must be the apps domain (SLIPWAY_APPS_DOMAIN=${domain}), got '${url.hostname}'`,
    );
  if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '' || url.username !== '')
    throw new ConfigError(name, 'must be a scheme, host and optional port only (apps are at the root of their host)');
  return url.origin;
}

function appsTls(env: Env, cwd: string): Config['appsTls'] {
  const cert = text(env, 'SLIPWAY_APPS_TLS_CERT');
  const key = text(env, 'SLIPWAY_APPS_TLS_KEY');
  if (cert === null && key === null) return null;
  if (cert === null) throw new ConfigError('SLIPWAY_APPS_TLS_CERT', 'is required with SLIPWAY_APPS_TLS_KEY');
  if (key === null) throw new ConfigError('SLIPWAY_APPS_TLS_KEY', 'is required with SLIPWAY_APPS_TLS_CERT');
  return { certFile: path.resolve(cwd, cert), keyFile: path.resolve(cwd, key) };
}

function edgeProxy(env: Env): EdgeProxyMode {
  const raw = text(env, 'SLIPWAY_EDGE_PROXY');
  if (raw === null) return 'auto';
  const mode = raw.toLowerCase();
  if (mode !== 'auto' && mode !== 'haproxy' && mode !== 'builtin')
    throw new ConfigError('SLIPWAY_EDGE_PROXY', `must be auto, haproxy or builtin, got '${raw}'`);
  return mode;
}

function sandbox(env: Env): SandboxMode {
  const raw = text(env, 'SLIPWAY_SANDBOX');
  if (raw === null) return 'auto';
  const mode = raw.toLowerCase();
  if (mode !== 'auto' && mode !== 'bwrap' && mode !== 'none')
    throw new ConfigError('SLIPWAY_SANDBOX', `must be auto, bwrap or none, got '${raw}'`);
  return mode;
}

/** A bearer token for /metrics: printable, without spaces, long enough not to be guessed. */
function metricsToken(env: Env): string | null {
  const raw = text(env, 'SLIPWAY_METRICS_TOKEN');
  if (raw === null) return null;
  if (raw.length < 16 || raw.length > 256 || !/^[\x21-\x7e]+$/.test(raw)) {
    throw new ConfigError('SLIPWAY_METRICS_TOKEN', 'must be 16 to 256 printable characters without spaces');
  }
  return raw;
}

/** An OTLP/HTTP endpoint: http or https, no credentials in it (they go in OTEL_EXPORTER_OTLP_HEADERS). */
function otlpUrl(env: Env, name: string): string | null {
  const given = httpUrl(env, name, 'http://127.0.0.1:4318');
  if (given === null) return null;
  const { raw, url } = given;
  if (url.username !== '' || url.password !== '')
    throw new ConfigError(
      name,
      'must be an http(s) URL without user or password (headers: OTEL_EXPORTER_OTLP_HEADERS)',
    );
  return raw.replace(/\/+$/, '');
}

/**
 * The standard OpenTelemetry variables (the OTLP/HTTP exporter's own names, so an operator's usual
 * settings work): traces are made only when an endpoint is set.
 */
function tracing(env: Env): TracingConfig | null {
  const endpoint = otlpUrl(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  const tracesUrl = otlpUrl(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') ?? (endpoint ? `${endpoint}/v1/traces` : null);
  if (tracesUrl === null) return null;
  const headers: Record<string, string> = {};
  for (const pair of (text(env, 'OTEL_EXPORTER_OTLP_HEADERS') ?? '').split(',')) {
    if (pair.trim() === '') continue;
    const at = pair.indexOf('=');
    const name = at > 0 ? pair.slice(0, at).trim() : '';
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name))
      throw new ConfigError('OTEL_EXPORTER_OTLP_HEADERS', 'must be name=value pairs separated by commas');
    try {
      headers[name] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new ConfigError('OTEL_EXPORTER_OTLP_HEADERS', `the value of ${name} is not valid percent-encoding`);
    }
  }
  const serviceName = text(env, 'OTEL_SERVICE_NAME') ?? 'slipway';
  return Object.freeze({ tracesUrl, endpoint, headers: Object.freeze(headers), serviceName });
}

/**
 * SLIPWAY_SSO_*: all off without SLIPWAY_SSO_ISSUER. The issuer must be https unless insecure OAuth is
 * allowed for development (the same switch as for OAuth providers).
 */
function sso(env: Env, allowInsecure: boolean): SsoConfig | null {
  const issuer = text(env, 'SLIPWAY_SSO_ISSUER');
  if (issuer === null) {
    const stray = ['SLIPWAY_SSO_CLIENT_ID', 'SLIPWAY_SSO_CLIENT_SECRET'].find((name) => text(env, name) !== null);
    if (stray !== undefined) throw new ConfigError('SLIPWAY_SSO_ISSUER', `is required with ${stray}`);
    return null;
  }
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new ConfigError('SLIPWAY_SSO_ISSUER', `must be the provider's issuer URL, got '${issuer}'`);
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowInsecure))
    throw new ConfigError(
      'SLIPWAY_SSO_ISSUER',
      'must be an https URL (plain http only with SLIPWAY_ALLOW_INSECURE_OAUTH=1, for development)',
    );
  if (url.search !== '' || url.hash !== '' || url.username !== '')
    throw new ConfigError('SLIPWAY_SSO_ISSUER', 'must have no query, fragment or credentials');
  const clientId = text(env, 'SLIPWAY_SSO_CLIENT_ID');
  if (clientId === null) throw new ConfigError('SLIPWAY_SSO_CLIENT_ID', 'is required with SLIPWAY_SSO_ISSUER');
  const scopes = (text(env, 'SLIPWAY_SSO_SCOPES') ?? 'openid email profile').split(/[\s,]+/).filter((s) => s !== '');
  for (const scope of scopes)
    if (!/^[\x21\x23-\x5b\x5d-\x7e]{1,128}$/.test(scope))
      throw new ConfigError('SLIPWAY_SSO_SCOPES', `'${scope}' is not a valid scope`);
  const groupsClaim = text(env, 'SLIPWAY_SSO_GROUPS_CLAIM') ?? 'groups';
  if (!/^[A-Za-z0-9_:./-]{1,128}$/.test(groupsClaim))
    throw new ConfigError('SLIPWAY_SSO_GROUPS_CLAIM', `must be a claim name such as groups, got '${groupsClaim}'`);
  return {
    issuer,
    clientId,
    clientSecret: text(env, 'SLIPWAY_SSO_CLIENT_SECRET'),
    scopes: [...new Set(['openid', ...scopes])],
    groupsClaim,
    sessionTtlMs: integer(env, 'SLIPWAY_SSO_SESSION_HOURS', 12, 1, 24 * 30) * 3_600_000,
    providerName: (text(env, 'SLIPWAY_SSO_PROVIDER_NAME') ?? 'single sign-on').slice(0, 64),
  };
}

/** Reads and validates the configuration; `env` defaults to the process environment. */
export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Config {
  const port = integer(env, 'PORT', 8124, 0, 65535);
  const host = text(env, 'HOST') ?? '127.0.0.1';
  const database = databaseUrl(env);
  const domain = appsDomain(env);
  return Object.freeze({
    port,
    host,
    databaseUrl: database,
    dataDir: path.resolve(cwd, text(env, 'SLIPWAY_DATA_DIR') ?? '.slipway'),
    bootstrapApiKey: bootstrapApiKey(env),
    encryptionKey: requiredEncryptionKey(env, database),
    previousEncryptionKey: encryptionKey(env, 'SLIPWAY_PREVIOUS_ENCRYPTION_KEY'),
    logLevel: logLevel(env),
    bodyLimitBytes: integer(env, 'SLIPWAY_BODY_LIMIT_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    uploadLimitBytes: integer(env, 'SLIPWAY_UPLOAD_LIMIT_BYTES', 200 * 1024 * 1024, 1024, 4 * 1024 * 1024 * 1024),
    allowInsecureOAuth: flag(env, 'SLIPWAY_ALLOW_INSECURE_OAUTH'),
    allowInsecureCodehost: flag(env, 'SLIPWAY_ALLOW_INSECURE_CODEHOST'),
    codehostAllowedUrls: codehostAllowedUrls(env),
    publicUrl: publicUrl(env, host, port),
    roles: roles(env),
    workerConcurrency: integer(env, 'SLIPWAY_WORKER_CONCURRENCY', 2, 1, 64),
    appsDomain: domain,
    appsHost: text(env, 'SLIPWAY_APPS_HOST') ?? host,
    appsPort: appsPort(env, port),
    appsPublicUrl: appsPublicUrl(env, domain),
    appsTls: appsTls(env, cwd),
    edgeProxy: edgeProxy(env),
    sandbox: sandbox(env),
    // Why these defaults: src/dataplane/resource-limits.ts.
    defaultLimits: {
      memoryBytes:
        integer(env, 'SLIPWAY_APP_MEMORY_MB', DEFAULT_LIMITS.memoryBytes / 1024 ** 2, 16, 1024 * 1024) * 1024 ** 2,
      cpu: decimal(env, 'SLIPWAY_APP_CPU', DEFAULT_LIMITS.cpu, 0.01, 1024),
      pids: integer(env, 'SLIPWAY_APP_PIDS', DEFAULT_LIMITS.pids, 16, 1_000_000),
    },
    healthTimeoutMs: integer(env, 'SLIPWAY_HEALTH_TIMEOUT_SECONDS', 60, 1, 3600) * 1000,
    drainTimeoutMs: integer(env, 'SLIPWAY_DRAIN_SECONDS', 10, 0, 600) * 1000,
    logMaxLines: integer(env, 'SLIPWAY_LOG_MAX_LINES', 10_000, 100, 1_000_000),
    eventRetentionDays: integer(env, 'SLIPWAY_EVENT_RETENTION_DAYS', 90, 0, 36_500),
    uploadRetentionHours: integer(env, 'SLIPWAY_UPLOAD_RETENTION_HOURS', 24, 1, 87_600),
    streamsPerKey: integer(env, 'SLIPWAY_STREAMS_PER_KEY', 20, 1, 100_000),
    streamsPerAddress: integer(env, 'SLIPWAY_STREAMS_PER_ADDRESS', 100, 1, 100_000),
    metricsToken: metricsToken(env),
    sso: sso(env, flag(env, 'SLIPWAY_ALLOW_INSECURE_OAUTH')),
    tracing: tracing(env),
  });
}
