/**
 * The service's logger: pino JSON lines. Credentials never reach a log line: API keys, authorization
 * and cookie headers are redacted, and so are credential-like query parameters (the OAuth callback
 * carries its code and state in the query).
 */
import pino, { type Logger } from 'pino';
import type { LogLevel } from './config.ts';

const SENSITIVE_QUERY = /([?&](?:code|state|token|access_token|refresh_token|client_secret|id_token)=)[^&#]*/gi;

export function redactUrl(url: string): string {
  return url.replace(SENSITIVE_QUERY, '$1[redacted]');
}

interface RequestLike {
  method?: string;
  url?: string;
  headers?: Record<string, unknown>;
  socket?: { remoteAddress?: string };
  id?: string;
}

/**
 * Every line carries the process's own `pid` (pino's base). A `pid` in a call's object (another
 * process's, say a database server's) would put a second `pid` key on the line, which JSON parsers
 * resolve differently (most keep the last): it is renamed.
 */
function withoutPid(object: Record<string, unknown>): Record<string, unknown> {
  if (!Object.hasOwn(object, 'pid')) return object;
  const { pid, ...rest } = object;
  return { ...rest, otherPid: pid };
}

export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    formatters: { log: withoutPid },
    redact: {
      paths: ['req.headers["x-api-key"]', 'req.headers.authorization', 'req.headers.cookie'],
      censor: '[redacted]',
    },
    serializers: {
      req: (request: RequestLike) => ({
        method: request.method,
        url: request.url === undefined ? undefined : redactUrl(request.url),
        remoteAddress: request.socket?.remoteAddress,
      }),
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
