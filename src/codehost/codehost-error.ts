/**
 * Failures of a code host's API, classified so the HTTP layer can answer the user with a stable status:
 *
 * - `rejected`: the host refused the integration's credentials (401, a 403 that is not a rate limit, an
 *   unknown installation, an unusable private key). The user must fix the integration.
 * - `rate_limited`: the host asks us to slow down; `retryAfterSeconds` is set when the host said when.
 * - `unavailable`: the host is down, answered 5xx, or could not be reached at all. Retrying later may work.
 * - `unexpected`: every other answer we do not understand (a 422, a malformed body).
 *
 * Messages are written here, never copied whole from a thrown error, because tokens and private keys
 * appear in no message (docs/codehost.md); the host's own short message is kept (redacted) since it
 * is what tells a user why ("Bad credentials", "API rate limit exceeded").
 */

export type CodeHostFailure = 'rejected' | 'rate_limited' | 'unavailable' | 'unexpected';

export class CodeHostError extends Error {
  /**
   * For the service log only, never for the caller: why a host could not be reached (refused, TLS, DNS,
   * timeout). Told apart in an answer, these would map the network behind the service for whoever can
   * point an integration somewhere.
   */
  logDetail: string | undefined;

  constructor(
    readonly kind: CodeHostFailure,
    message: string,
    /** The host's HTTP status, when it answered at all. */
    readonly hostStatus?: number,
    /** Seconds the host asked us to wait, for `rate_limited` (and a 503 that sent Retry-After). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'CodeHostError';
  }
}

/** The parts of an `@octokit/request-error` RequestError we read; duck-typed to avoid a transitive import. */
interface HostResponseError {
  status: number;
  message: string;
  request?: { url?: string };
  response?: { headers: Record<string, string | number | undefined>; data?: unknown };
}

function isHostResponseError(error: unknown): error is HostResponseError {
  return (
    typeof error === 'object' &&
    error !== null &&
    'status' in error &&
    typeof error.status === 'number' &&
    error instanceof Error
  );
}

/**
 * True for a failed exchange of the app JWT for an installation token. A 404 there means the installation
 * does not exist (uninstalled, or a wrong installation_id): the integration is broken, not a repository
 * missing.
 */
export function isTokenExchangeFailure(error: unknown): boolean {
  return isHostResponseError(error) && /\/app\/installations\/[^/]+\/access_tokens$/.test(error.request?.url ?? '');
}

/** Removes every secret from a message; a host may echo what it was sent. */
export function redact(message: string, secrets: readonly string[]): string {
  let out = message;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join('[REDACTED]');
  }
  return out;
}

function header(error: HostResponseError, name: string): string | undefined {
  const value = error.response?.headers[name];
  return value === undefined ? undefined : String(value);
}

/** Retry-After is either delta-seconds or an HTTP date (RFC 9110 §10.2.3). */
function parseRetryAfter(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - nowMs) / 1000));
}

function isRateLimit(error: HostResponseError): boolean {
  if (error.status === 429) return true;
  if (error.status !== 403) return false;
  // GitHub answers a primary rate limit with 403 and x-ratelimit-remaining: 0, a secondary one with 403
  // and retry-after; both say "rate limit" in the message.
  return (
    header(error, 'x-ratelimit-remaining') === '0' ||
    header(error, 'retry-after') !== undefined ||
    /rate limit/i.test(error.message)
  );
}

function retryAfterOf(error: HostResponseError, nowMs: number): number | undefined {
  const retryAfter = parseRetryAfter(header(error, 'retry-after'), nowMs);
  if (retryAfter !== undefined) return retryAfter;
  const reset = header(error, 'x-ratelimit-reset');
  if (header(error, 'x-ratelimit-remaining') === '0' && reset !== undefined && /^\d+$/.test(reset)) {
    return Math.max(0, Number(reset) - Math.floor(nowMs / 1000));
  }
  return undefined;
}

function shortHostMessage(error: HostResponseError, secrets: readonly string[]): string {
  const text = redact(error.message, secrets).replace(/\s+/g, ' ').trim();
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

export interface ClassifyContext {
  /** Host name shown in messages, e.g. `api.github.com`. */
  host: string;
  /** The integration's API URL, named when the host could not be reached. */
  apiUrl: string;
  /** What we were doing, e.g. `listing repositories`. */
  action: string;
  /** Credential strings that must not appear in the message. */
  secrets: readonly string[];
  nowMs: number;
}

/**
 * No answer at all: refused, reset, TLS, DNS or a deadline. One message for all of them, whatever the
 * cause; the cause goes to `logDetail`.
 */
function unreachable(context: ClassifyContext, cause: string): CodeHostError {
  const error = new CodeHostError(
    'unavailable',
    `The code host at ${context.apiUrl} could not be reached while ${context.action}.`,
  );
  // A URL's query can hold a token (codeload's signed download links do): origin and path only.
  error.logDetail = redact(cause, context.secrets)
    .replace(/(\w+:\/\/[^\s?#]*)[?#]\S*/g, '$1?[redacted]')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, 500);
  return error;
}

/** The message of an error and of its causes, e.g. `fetch failed: connect ECONNREFUSED 127.0.0.1:9`. */
function causeChain(error: unknown): string {
  const parts: string[] = [];
  for (
    let current: unknown = error, depth = 0;
    current instanceof Error && depth < 5;
    current = current.cause, depth += 1
  ) {
    const code = (current as { code?: unknown }).code;
    parts.push(
      typeof code === 'string' && !current.message.includes(code) ? `${current.message} (${code})` : current.message,
    );
  }
  return parts.join(': ');
}

/**
 * Turns whatever Octokit threw into a CodeHostError. Errors that did not come from talking to the host
 * (a bug in our code) are returned unchanged so they surface as internal errors, not as a host failure.
 */
export function classifyHostFailure(error: unknown, context: ClassifyContext): Error {
  if (error instanceof CodeHostError) return error;
  const { host, action } = context;
  if (!isHostResponseError(error)) {
    if (error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError')) {
      return unreachable(context, `no answer in time: ${causeChain(error)}`);
    }
    return error instanceof Error ? error : new Error(String(error));
  }
  if (error.response === undefined) {
    // @octokit/request reports a failed fetch (refused connection, DNS, TLS, timeout) as status 500
    // without a response.
    return unreachable(context, causeChain(error));
  }
  const status = error.status;
  const hostMessage = shortHostMessage(error, context.secrets);
  if (isRateLimit(error)) {
    const retryAfter = retryAfterOf(error, context.nowMs);
    return new CodeHostError(
      'rate_limited',
      `The code host ${host} rate-limited the integration while ${action} (HTTP ${status}: ${hostMessage}).` +
        (retryAfter === undefined ? '' : ` Retry after ${retryAfter} seconds.`),
      status,
      retryAfter,
    );
  }
  if (status === 401 || status === 403 || (status === 404 && isTokenExchangeFailure(error))) {
    return new CodeHostError(
      'rejected',
      `The code host ${host} rejected the integration's credentials while ${action} (HTTP ${status}: ${hostMessage}).`,
      status,
    );
  }
  if (status >= 500) {
    return new CodeHostError(
      'unavailable',
      `The code host ${host} is unavailable while ${action} (HTTP ${status}: ${hostMessage}).`,
      status,
      parseRetryAfter(header(error, 'retry-after'), context.nowMs),
    );
  }
  return new CodeHostError(
    'unexpected',
    `The code host ${host} answered HTTP ${status} while ${action}: ${hostMessage}.`,
    status,
  );
}
