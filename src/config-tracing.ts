/**
 * The OpenTelemetry settings of src/config.ts (docs/operations.md, "Traces"): the OTLP/HTTP exporter's
 * standard variables.
 */
import { ConfigError, httpUrl, text, type Env } from './config-values.ts';

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
export function tracing(env: Env): TracingConfig | null {
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
