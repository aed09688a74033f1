/**
 * The only reader of the environment. Every setting lives here or, for the apps, single sign-on,
 * stream budgets and traces, in config-apps.ts, config-sso.ts, config-streams.ts and config-tracing.ts, which read the environment this passes
 * them; `loadConfig` validates once at start and fails fast with an error that names the variable.
 */
import path from 'node:path';
import {
  appsDomain,
  appsPort,
  appsPublicUrl,
  appsTls,
  appUids,
  edgeProxy,
  sandbox,
  type AppUidRange,
  type EdgeProxyMode,
  type SandboxMode,
} from './config-apps.ts';
import { CREDENTIAL_PREFIXES, isCredentialOf } from './auth/credentials.ts';
import { diskLimits, type DiskLimits } from './config-disk.ts';
import { hostFacts, limitMaxima, type HostFacts, type LimitMaxima } from './config-limits.ts';
import { sso, type SsoConfig } from './config-sso.ts';
import { streamBudgets, trustedProxies, type StreamBudgets } from './config-streams.ts';
import { registrySettings, type RegistrySettings } from './config-registries.ts';
import { tracing, type TracingConfig } from './config-tracing.ts';
import { ConfigError, decimal, flag, integer, text, type Env } from './config-values.ts';
import { DEFAULT_LIMITS, type DefaultLimits } from './dataplane/resource-limits.ts';

// What other modules name from here; each area's settings are read in its own config-*.ts.
export { ConfigError } from './config-values.ts';
export type { EdgeProxyMode, SandboxMode } from './config-apps.ts';
export type { DiskLimits } from './config-disk.ts';
export type { HostFacts, LimitMaxima } from './config-limits.ts';
export type { SsoConfig } from './config-sso.ts';
export type { StreamBudgets } from './config-streams.ts';
export type { RegistrySettings } from './config-registries.ts';
export type { TracingConfig } from './config-tracing.ts';

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
  /** How long the API waits for a request's head (request line and headers) before closing the connection. */
  readonly headersTimeoutMs: number;
  /** Connections the API holds from one client address at once; more are closed as they come. */
  readonly maxConnectionsPerAddress: number;
  /** Database connections all apps of one workspace may hold at once through their forwards. */
  readonly appDatabaseConnectionsPerWorkspace: number;
  /**
   * How often the local data plane measures each app database against its storage limit, in
   * milliseconds (src/dataplane/app-database-storage.ts).
   */
  readonly databaseCheckIntervalMs: number;
  /** Largest source tarball accepted by the upload endpoint, in bytes. */
  readonly uploadLimitBytes: number;
  /** Plain-http OAuth endpoints, for development and tests only. */
  readonly allowInsecureOAuth: boolean;
  /**
   * Who may call LangGraph deployments' /mcp and /a2a when the project has no custom auth:
   * `deployment` (each deployment's SLIPWAY_PROTOCOLS_AUTH, open unless it says otherwise) or
   * `credential` (every deployment requires a protocol credential; docs/langgraph.md).
   */
  readonly appsProtocolsAuth: 'deployment' | 'credential';
  /** Plain-http code-host API URLs, for development and tests only. */
  readonly allowInsecureCodehost: boolean;
  /**
   * The code-host API URLs integrations may name, as normalized prefixes (origin plus path, no trailing
   * slash): an integration makes the service connect to its api_url, so only hosts the operator lists.
   */
  readonly codehostAllowedUrls: readonly string[];
  /**
   * Open pull requests that have a preview at once, per deployment, unless the deployment's own setting
   * says otherwise (docs/codehost.md, "Pull-request previews"); 0 turns previews off.
   */
  readonly previewsPerDeployment: number;
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
   * Whether the service gives itself a CPU group that weighs four times as much as all apps together, so the API
   * answers promptly under app load (src/dataplane/service-cpu-reserve.ts). SLIPWAY_SERVICE_CPU_RESERVE,
   * on by default where the host allows it.
   */
  readonly serviceCpuReserve: boolean;
  /** The host uids deployments get one each of when the service is root (SLIPWAY_APP_UIDS). */
  readonly appUids: AppUidRange;
  /**
   * Limits of an app instance whose resource_spec is silent (and the least a build gets): memory in
   * bytes, CPU in cores, processes; `maximum` is what the data plane clamps any spec to (from `limits`).
   */
  readonly defaultLimits: Readonly<DefaultLimits>;
  /**
   * The operator's maxima (src/config-limits.ts): per instance, per deployment, per build, and for all
   * apps together. The API refuses a resource spec or a workspace quota over them.
   */
  readonly limits: LimitMaxima;
  /** Where apps keep their data and how much disk each deployment and build may take (src/config-disk.ts). */
  readonly disk: DiskLimits;
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
  /** Streams (followed logs) and long-polls each key, workspace, app and anonymous address may hold open (config-streams.ts). */
  readonly streams: StreamBudgets;
  /** Reverse proxies (addresses, CIDR ranges) whose X-Forwarded-For names the client; empty: none. */
  readonly trustedProxies: readonly string[];
  /** When set, GET /metrics needs `Authorization: Bearer <this>`; null leaves it open. */
  readonly metricsToken: string | null;
  /** Dashboard sign-in through an OpenID Connect provider (docs/operations.md, "Single sign-on"); null: off. */
  readonly sso: SsoConfig | null;
  /** OpenTelemetry traces over OTLP/HTTP (docs/operations.md, "Traces"); null: no traces are made. */
  readonly tracing: TracingConfig | null;
  /** The package registries, CA bundle and proxies builds use (config-registries.ts). */
  readonly buildRegistries: RegistrySettings;
}

export type Role = 'api' | 'worker';

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

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
  // The app edges remove the service's keys from requests to apps by this prefix: a key without it
  // would reach any app a caller sends it to (LangGraph's SDK sends its key to deployments).
  if (!isCredentialOf('apiKey', raw)) {
    throw new ConfigError(
      'SLIPWAY_BOOTSTRAP_API_KEY',
      `must start with ${KEY_PREFIX}, the prefix by which the app edges recognise the service's keys and keep them from apps: set it to ${KEY_PREFIX} followed by a random value, such as ${KEY_PREFIX}$(openssl rand -hex 24)`,
    );
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

const KEY_PREFIX = CREDENTIAL_PREFIXES.apiKey;
/** The prefix of the /metrics bearer token (the app edges strip it, as they strip `slw_` keys). */
const METRICS_TOKEN_PREFIX = CREDENTIAL_PREFIXES.metrics;

/** A bearer token for /metrics: printable, without spaces, long enough not to be guessed, with its prefix. */
function metricsToken(env: Env): string | null {
  const raw = text(env, 'SLIPWAY_METRICS_TOKEN');
  if (raw === null) return null;
  if (raw.length < 16 || raw.length > 256 || !/^[\x21-\x7e]+$/.test(raw)) {
    throw new ConfigError('SLIPWAY_METRICS_TOKEN', 'must be 16 to 256 printable characters without spaces');
  }
  // A scraper sends it as a bearer token, to apps' URLs too if it is set up that way: the app edges
  // remove the service's credentials by their prefix, and this one must be among them.
  if (!isCredentialOf('metrics', raw)) {
    throw new ConfigError(
      'SLIPWAY_METRICS_TOKEN',
      `must start with ${METRICS_TOKEN_PREFIX}, the prefix by which the app edges recognise it and keep it from apps: set it to ${METRICS_TOKEN_PREFIX} followed by a random value, such as ${METRICS_TOKEN_PREFIX}$(openssl rand -hex 24)`,
    );
  }
  return raw;
}

function appsProtocolsAuth(env: Env): 'deployment' | 'credential' {
  const value = text(env, 'SLIPWAY_APPS_PROTOCOLS_AUTH') ?? 'deployment';
  if (value !== 'deployment' && value !== 'credential')
    throw new ConfigError('SLIPWAY_APPS_PROTOCOLS_AUTH', `must be deployment or credential, got ${value}`);
  return value;
}

/**
 * Reads and validates the configuration; `env` defaults to the process environment, `machine` (what the
 * limits' defaults are sized from) to this machine.
 */
export function loadConfig(
  env: Env = process.env,
  cwd: string = process.cwd(),
  machine: HostFacts = hostFacts(),
): Config {
  const defaults = {
    memoryBytes:
      integer(env, 'SLIPWAY_APP_MEMORY_MB', DEFAULT_LIMITS.memoryBytes / 1024 ** 2, 16, 1024 * 1024) * 1024 ** 2,
    cpu: decimal(env, 'SLIPWAY_APP_CPU', DEFAULT_LIMITS.cpu, 0.01, 1024),
    pids: integer(env, 'SLIPWAY_APP_PIDS', DEFAULT_LIMITS.pids, 16, 1_000_000),
  };
  const limits = limitMaxima(env, machine, defaults);
  const port = integer(env, 'PORT', 8124, 0, 65535);
  const host = text(env, 'HOST') ?? '127.0.0.1';
  const database = databaseUrl(env);
  const domain = appsDomain(env);
  const dataDir = path.resolve(cwd, text(env, 'SLIPWAY_DATA_DIR') ?? '.slipway');
  return Object.freeze({
    port,
    host,
    databaseUrl: database,
    dataDir,
    bootstrapApiKey: bootstrapApiKey(env),
    encryptionKey: requiredEncryptionKey(env, database),
    previousEncryptionKey: encryptionKey(env, 'SLIPWAY_PREVIOUS_ENCRYPTION_KEY'),
    logLevel: logLevel(env),
    bodyLimitBytes: integer(env, 'SLIPWAY_BODY_LIMIT_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    headersTimeoutMs: integer(env, 'SLIPWAY_HEADERS_TIMEOUT_SECONDS', 10, 1, 300) * 1000,
    // A reverse proxy in front brings every client through one address: sized for a fleet of a thousand
    // listeners long-polling through it, far below the descriptors one slow client could otherwise take.
    maxConnectionsPerAddress: integer(env, 'SLIPWAY_MAX_CONNECTIONS_PER_ADDRESS', 2048, 1, 1_000_000),
    // Half of what all apps together may hold (the embedded server's slots less the service's): a
    // workspace holding its whole budget leaves the other half to every other tenant.
    appDatabaseConnectionsPerWorkspace: integer(env, 'SLIPWAY_APP_DATABASE_CONNECTIONS_PER_WORKSPACE', 75, 1, 100_000),
    // Each measure walks every app database's files: every 15 s costs little, and an app writing as
    // fast as the disk allows between two measures is what the cut-off margin is for.
    databaseCheckIntervalMs: integer(env, 'SLIPWAY_DATABASE_CHECK_SECONDS', 15, 1, 3600) * 1000,
    uploadLimitBytes: integer(env, 'SLIPWAY_UPLOAD_LIMIT_BYTES', 200 * 1024 * 1024, 1024, 4 * 1024 * 1024 * 1024),
    allowInsecureOAuth: flag(env, 'SLIPWAY_ALLOW_INSECURE_OAUTH'),
    appsProtocolsAuth: appsProtocolsAuth(env),
    allowInsecureCodehost: flag(env, 'SLIPWAY_ALLOW_INSECURE_CODEHOST'),
    codehostAllowedUrls: codehostAllowedUrls(env),
    previewsPerDeployment: integer(env, 'SLIPWAY_PREVIEWS_PER_DEPLOYMENT', 3, 0, 10),
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
    serviceCpuReserve: text(env, 'SLIPWAY_SERVICE_CPU_RESERVE') === null || flag(env, 'SLIPWAY_SERVICE_CPU_RESERVE'),
    appUids: appUids(env),
    // Why these defaults: src/dataplane/resource-limits.ts.
    defaultLimits: Object.freeze({
      ...defaults,
      maximum: Object.freeze({
        instance: { memoryBytes: limits.instanceMemoryMb * 1024 ** 2, cpu: limits.instanceCpu },
        build: { memoryBytes: limits.buildMemoryMb * 1024 ** 2, cpu: limits.buildCpu },
        instances: limits.instances,
      }),
    }),
    limits,
    disk: diskLimits(env, cwd, dataDir),
    healthTimeoutMs: integer(env, 'SLIPWAY_HEALTH_TIMEOUT_SECONDS', 60, 1, 3600) * 1000,
    drainTimeoutMs: integer(env, 'SLIPWAY_DRAIN_SECONDS', 10, 0, 600) * 1000,
    logMaxLines: integer(env, 'SLIPWAY_LOG_MAX_LINES', 10_000, 100, 1_000_000),
    eventRetentionDays: integer(env, 'SLIPWAY_EVENT_RETENTION_DAYS', 90, 0, 36_500),
    uploadRetentionHours: integer(env, 'SLIPWAY_UPLOAD_RETENTION_HOURS', 24, 1, 87_600),
    streams: streamBudgets(env),
    trustedProxies: trustedProxies(env),
    metricsToken: metricsToken(env),
    sso: sso(env, flag(env, 'SLIPWAY_ALLOW_INSECURE_OAUTH')),
    tracing: tracing(env),
    buildRegistries: registrySettings(env, cwd),
  });
}
