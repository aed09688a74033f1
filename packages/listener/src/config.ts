/**
 * The listener agent's only reader of the environment. Every setting and its default lives here;
 * `loadListenerConfig` validates once at start and fails fast with an error naming the variable, so
 * that a listener installed wrong says so in its first log line instead of misbehaving later.
 */

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface ListenerConfig {
  /** The Slipway service, without a trailing slash (SLIPWAY_URL). */
  readonly slipwayUrl: string;
  /** The listener this agent serves (SLIPWAY_LISTENER_ID). */
  readonly listenerId: string;
  /** The listener credential, `slwl_...` (SLIPWAY_LISTENER_CREDENTIAL). */
  readonly credential: string;
  /** Namespaces the agent watches and deploys to; the first is used when a deployment names none. */
  readonly namespaces: readonly string[];
  /** A kubeconfig file; null means the in-cluster service account (KUBECONFIG). */
  readonly kubeconfigPath: string | null;
  /** How long one desired-state long-poll may wait for a change, 0 to 60 seconds. */
  readonly pollWaitSeconds: number;
  /** Seconds between heartbeats. */
  readonly heartbeatSeconds: number;
  /** The port the app container listens on (its PORT). */
  readonly appPort: number;
  /** Kubernetes marks a rollout failed after this long without progress. */
  readonly progressDeadlineSeconds: number;
  /** Image of the deployment's PostgreSQL when `db_*` fields are set. */
  readonly postgresImage: string;
  /** Image of the deployment's cache when `cache_*` fields are set. */
  readonly redisImage: string;
  readonly logLevel: LogLevel;
  /**
   * The operator's Gateway (`<namespace>/<name>`, SLIPWAY_LISTENER_GATEWAY) that endpoints' HTTPRoutes
   * attach to; absent or null: no HTTPRoute is written, and an endpoint's split is not served.
   */
  readonly gateway?: { readonly namespace: string; readonly name: string } | null;
  /** The domain of endpoints' host names on that Gateway, `<deployment>--<endpoint>.<domain>` (SLIPWAY_LISTENER_GATEWAY_DOMAIN). */
  readonly gatewayDomain?: string | null;
}

export class ListenerConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ListenerConfigError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function text(env: Env, name: string): string | null {
  const value = env[name];
  return value === undefined || value.trim() === '' ? null : value.trim();
}

function required(env: Env, name: string, hint: string): string {
  const value = text(env, name);
  if (value === null) throw new ListenerConfigError(name, `is required (${hint})`);
  return value;
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === null) return fallback;
  if (!/^\d+$/.test(raw)) throw new ListenerConfigError(name, `must be an integer, got '${raw}'`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ListenerConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function slipwayUrl(env: Env): string {
  const raw = required(env, 'SLIPWAY_URL', 'the address of the Slipway service, e.g. https://slipway.example.com');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ListenerConfigError('SLIPWAY_URL', `is not a URL: '${raw}'`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ListenerConfigError('SLIPWAY_URL', `must be an http(s) URL, got ${url.protocol}//`);
  if (url.username !== '' || url.password !== '')
    throw new ListenerConfigError('SLIPWAY_URL', 'must not carry credentials; set SLIPWAY_LISTENER_CREDENTIAL');
  if (url.search !== '' || url.hash !== '')
    throw new ListenerConfigError('SLIPWAY_URL', 'must not have a query or a fragment');
  return `${url.origin}${url.pathname}`.replace(/\/+$/, '');
}

function listenerId(env: Env): string {
  const raw = required(env, 'SLIPWAY_LISTENER_ID', 'the id returned by POST /v2/listeners');
  if (!UUID.test(raw))
    throw new ListenerConfigError('SLIPWAY_LISTENER_ID', `must be a listener id (a UUID), got '${raw}'`);
  return raw.toLowerCase();
}

function credential(env: Env): string {
  const raw = required(env, 'SLIPWAY_LISTENER_CREDENTIAL', 'made by POST /v2/listeners/{id}/credentials');
  if (!raw.startsWith('slwl_') || !/^[\x21-\x7e]+$/.test(raw)) {
    // Never echo the value: it may be a real secret pasted into the wrong variable.
    throw new ListenerConfigError(
      'SLIPWAY_LISTENER_CREDENTIAL',
      'must be a listener credential (slwl_...), not an API key',
    );
  }
  return raw;
}

function namespaces(env: Env): readonly string[] {
  const name = 'SLIPWAY_LISTENER_NAMESPACES';
  const raw = required(env, name, 'comma-separated Kubernetes namespaces the listener deploys to, e.g. agents');
  const list = raw
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  if (list.length === 0) throw new ListenerConfigError(name, 'names no namespace');
  for (const ns of list) {
    if (!DNS_LABEL.test(ns))
      throw new ListenerConfigError(
        name,
        `'${ns}' is not a Kubernetes namespace name (lowercase letters, digits and -)`,
      );
  }
  return [...new Set(list)];
}

/**
 * The service fails a revision that stays AWAITING_DEPLOY or DEPLOYING for 30 minutes
 * (`deadline_exceeded`, without a word on why). A rollout deadline of the agent's must end well before
 * that, so that a stuck rollout fails with the agent's reason and message (the pods' waiting reasons):
 * 25 minutes at most leaves time for the applies before it and the report after it.
 */
export const MAX_PROGRESS_DEADLINE_SECONDS = 1500;

function progressDeadline(env: Env): number {
  const name = 'SLIPWAY_LISTENER_PROGRESS_DEADLINE_SECONDS';
  const raw = text(env, name);
  if (raw !== null && /^\d+$/.test(raw) && Number(raw) > MAX_PROGRESS_DEADLINE_SECONDS)
    throw new ListenerConfigError(
      name,
      `must be at most ${MAX_PROGRESS_DEADLINE_SECONDS} (25 minutes): the service fails a revision still rolling out after 30 minutes, got ${raw}`,
    );
  return integer(env, name, 600, 30, MAX_PROGRESS_DEADLINE_SECONDS);
}

function kubeconfigPath(env: Env): string | null {
  const path = text(env, 'KUBECONFIG');
  if (path !== null) return path;
  if (text(env, 'KUBERNETES_SERVICE_HOST') === null) {
    throw new ListenerConfigError(
      'KUBECONFIG',
      'is not set and this is not a Kubernetes pod (no KUBERNETES_SERVICE_HOST); set it to a kubeconfig file to run outside a cluster',
    );
  }
  return null;
}

function image(env: Env, name: string, fallback: string): string {
  const raw = text(env, name);
  if (raw === null) return fallback;
  if (/\s/.test(raw)) throw new ListenerConfigError(name, `must be an image reference without spaces, got '${raw}'`);
  return raw;
}

function gateway(env: Env): { namespace: string; name: string } | null {
  const name = 'SLIPWAY_LISTENER_GATEWAY';
  const raw = text(env, name);
  if (raw === null) return null;
  const [namespace, gatewayName, ...rest] = raw.split('/');
  if (
    rest.length > 0 ||
    namespace === undefined ||
    gatewayName === undefined ||
    !DNS_LABEL.test(namespace) ||
    !DNS_SUBDOMAIN.test(gatewayName)
  )
    throw new ListenerConfigError(name, `must be <namespace>/<name> of a Gateway, e.g. gateways/public, got '${raw}'`);
  return { namespace, name: gatewayName };
}

function gatewayDomain(env: Env): string | null {
  const name = 'SLIPWAY_LISTENER_GATEWAY_DOMAIN';
  const raw = text(env, name);
  if (raw === null) return null;
  if (!DNS_SUBDOMAIN.test(raw) || raw.length > 200)
    throw new ListenerConfigError(name, `must be a DNS domain such as apps.example.com, got '${raw}'`);
  return raw;
}

function logLevel(env: Env): LogLevel {
  const raw = text(env, 'LOG_LEVEL');
  if (raw === null) return 'info';
  const level = raw.toLowerCase() as LogLevel;
  if (!LOG_LEVELS.includes(level))
    throw new ListenerConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}`);
  return level;
}

export function loadListenerConfig(env: Env = process.env): ListenerConfig {
  return {
    slipwayUrl: slipwayUrl(env),
    listenerId: listenerId(env),
    credential: credential(env),
    namespaces: namespaces(env),
    kubeconfigPath: kubeconfigPath(env),
    pollWaitSeconds: integer(env, 'SLIPWAY_LISTENER_POLL_SECONDS', 30, 0, 60),
    heartbeatSeconds: integer(env, 'SLIPWAY_LISTENER_HEARTBEAT_SECONDS', 30, 5, 3600),
    appPort: integer(env, 'SLIPWAY_LISTENER_APP_PORT', 8080, 1, 65535),
    progressDeadlineSeconds: progressDeadline(env),
    postgresImage: image(env, 'SLIPWAY_LISTENER_POSTGRES_IMAGE', 'postgres:17-alpine'),
    redisImage: image(env, 'SLIPWAY_LISTENER_REDIS_IMAGE', 'redis:7-alpine'),
    logLevel: logLevel(env),
    gateway: gateway(env),
    gatewayDomain: gatewayDomain(env),
  };
}
