/**
 * The transport under every client call: a per-attempt timeout, and retries with exponential back-off
 * that honour Retry-After (openai-node's policy, narrowed to what is safe here):
 *
 * - a refused connection is retried for every method: the request never reached the service;
 * - a timeout, a broken connection, 408, 502, 504 and other 5xx are retried for idempotent methods
 *   (GET, HEAD, PUT, DELETE, OPTIONS) and for POST and PATCH, which carry one `Idempotency-Key` for all
 *   their attempts: the service answers a repeated attempt with the first one's result instead of
 *   acting twice, and keeps no key of a failed answer (docs/api.md, "Idempotent retries");
 * - 429 and 503 are retried for every method: the service refused the request without acting on it;
 * - 409 with Retry-After on a keyed request is the first attempt still running: wait, then ask again.
 */
import { randomUUID } from 'node:crypto';
import { sleep } from './sleep.ts';
import { SlipwayError } from './slipway-error.ts';

export interface RetryOptions {
  /** Attempts after the first (default 2). */
  maxRetries?: number;
  /** How long one attempt may wait for the answer's headers, in ms (default 60 s). A body being read (a followed log) is not cut. */
  timeoutMs?: number;
  /** First back-off delay, doubled per attempt up to maxDelayMs (defaults 500 ms and 8 s). */
  initialDelayMs?: number;
  maxDelayMs?: number;
  /** The fetch to send with (tests, proxies); default the global one. */
  fetch?: (request: Request) => Promise<Response>;
}

/** Per request: `false` sends it once (a single-use upload URL), retrying only a refused connection. */
export interface AttemptOptions {
  retry?: boolean;
}

export type RetryingFetch = (request: Request, options?: AttemptOptions) => Promise<Response>;

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);
const ALWAYS_RETRIED_STATUSES = new Set([429, 503]);
/** Longest Retry-After honoured: a longer one is the service saying "not now", better reported than waited for. */
const MAX_RETRY_AFTER_MS = 60_000;

export function createRetryingFetch(options: RetryOptions = {}): RetryingFetch {
  const maxRetries = options.maxRetries ?? 2;
  const timeoutMs = options.timeoutMs ?? 60_000;
  const initialDelayMs = options.initialDelayMs ?? 500;
  const maxDelayMs = options.maxDelayMs ?? 8_000;
  const send = options.fetch ?? ((request: Request) => fetch(request));

  return async (request, attemptOptions = {}) => {
    const method = request.method.toUpperCase();
    const keyed = method === 'POST' || method === 'PATCH';
    if (keyed && !request.headers.has('idempotency-key')) request.headers.set('Idempotency-Key', randomUUID());
    const idempotent = IDEMPOTENT.has(method) || keyed;
    const mayRetry = attemptOptions.retry !== false;

    for (let attempt = 0; ; attempt++) {
      const last = attempt >= maxRetries;
      let response: Response;
      try {
        // A clone per attempt: a body can be sent only once.
        response = await sendWithTimeout(send, request.clone(), timeoutMs);
      } catch (error) {
        if (request.signal.aborted) throw error;
        const failure = connectionError(error, request, timeoutMs);
        const retriable = refused(error) || (idempotent && mayRetry);
        if (last || !retriable) throw failure;
        await sleep(backoff(attempt, initialDelayMs, maxDelayMs), request.signal);
        continue;
      }
      const retriable =
        mayRetry &&
        (ALWAYS_RETRIED_STATUSES.has(response.status) ||
          (keyed && response.status === 409 && response.headers.has('retry-after')) ||
          (idempotent && (response.status === 408 || (response.status >= 500 && response.status !== 501))));
      if (last || !retriable) return response;
      const wait = retryAfterMs(response.headers) ?? backoff(attempt, initialDelayMs, maxDelayMs);
      if (wait > MAX_RETRY_AFTER_MS) return response;
      // Free the connection of the answer we do not read.
      await response.body?.cancel().catch(() => undefined);
      await sleep(wait, request.signal);
    }
  };
}

async function sendWithTimeout(
  send: (request: Request) => Promise<Response>,
  request: Request,
  timeoutMs: number,
): Promise<Response> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new TimeoutSignal(timeoutMs)), timeoutMs);
  // The caller's own signal still cancels the body after the headers came (a followed log).
  const onAbort = () => controller.abort(request.signal.reason);
  if (request.signal.aborted) onAbort();
  else request.signal.addEventListener('abort', onAbort, { once: true });
  try {
    return await send(new Request(request, { signal: controller.signal }));
  } finally {
    clearTimeout(timer);
  }
}

/** The abort reason of a timed-out attempt, told apart from the caller's own abort. */
class TimeoutSignal extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
  }
}

function refused(error: unknown): boolean {
  return errorCode(error) === 'ECONNREFUSED';
}

/** The system error code under fetch's "fetch failed" TypeError (ECONNREFUSED, ENOTFOUND, ...). */
function errorCode(error: unknown): string | undefined {
  let cause: unknown = error;
  for (let depth = 0; depth < 4 && cause instanceof Error; depth++) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return code;
    cause = cause.cause;
  }
  return undefined;
}

function connectionError(error: unknown, request: Request, timeoutMs: number): SlipwayError {
  const origin = new URL(request.url).origin;
  if (
    error instanceof TimeoutSignal ||
    (error instanceof Error && error.name === 'TimeoutError') ||
    (error instanceof Error && error.cause instanceof TimeoutSignal)
  ) {
    return new SlipwayError({
      status: null,
      code: 'timeout',
      detail: `${origin} did not answer within ${timeoutMs / 1000} s`,
      url: request.url,
      cause: error,
    });
  }
  const code = errorCode(error);
  const why =
    code === 'ECONNREFUSED'
      ? 'connection refused (is the service running?)'
      : code === 'ENOTFOUND' || code === 'EAI_AGAIN'
        ? 'host not found'
        : error instanceof Error
          ? (code ?? error.message)
          : String(error);
  return new SlipwayError({
    status: null,
    code: 'connection_failed',
    detail: `cannot reach ${origin}: ${why}`,
    url: request.url,
    cause: error,
  });
}

/** Retry-After in seconds or as an HTTP date (RFC 9110), or retry-after-ms; null when absent or unreadable. */
export function retryAfterMs(headers: Headers, now = Date.now()): number | null {
  const ms = headers.get('retry-after-ms');
  if (ms !== null && /^\d+(\.\d+)?$/.test(ms.trim())) return Number(ms);
  const value = headers.get('retry-after')?.trim();
  if (!value) return null;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

/** Exponential back-off with up to 25 % jitter downwards, so many clients do not retry in step. */
function backoff(attempt: number, initialMs: number, maxMs: number): number {
  const delay = Math.min(initialMs * 2 ** attempt, maxMs);
  return delay * (1 - Math.random() * 0.25);
}
