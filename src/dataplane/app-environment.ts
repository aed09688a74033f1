/**
 * The environment of what the local data plane runs. It is built from nothing: none of the service's
 * own variables (DATABASE_URL, SLIPWAY_ENCRYPTION_KEY, API keys) ever reach a build or an app. Later
 * layers win: base, then the app config's `env`, then the revision's secrets, then what the platform
 * sets (so a secret cannot pose as PORT or SLIPWAY_REVISION_ID).
 */
import path from 'node:path';

const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface AppPaths {
  src: string;
  home: string;
  /** The deployment's own writable directory (apps only). */
  data?: string;
}

/** PATH (with the app's virtualenv and the Node.js that runs the service), HOME, locale. */
function baseEnvironment(paths: AppPaths): Record<string, string> {
  return {
    PATH: [
      path.join(paths.src, '.venv', 'bin'),
      path.join(paths.src, 'node_modules', '.bin'),
      path.dirname(process.execPath),
      SYSTEM_PATH,
    ].join(':'),
    HOME: paths.home,
    LANG: 'C.UTF-8',
    TMPDIR: '/tmp',
    // Each revision has a fresh HOME, so npm would ask the registry for a newer npm at every start.
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
  };
}

export function buildEnvironment(
  paths: AppPaths,
  appEnv: Record<string, string>,
  secrets: Record<string, string>,
): Record<string, string> {
  return { ...baseEnvironment(paths), ...appEnv, ...secrets };
}

export interface PlatformVariables {
  deploymentId: string;
  revisionId: string;
  /** The endpoint the instances serve (a pull request's preview is one); null for the deployment's own URL. */
  endpoint: string | null;
  tracingProjectId: string;
  tracingProjectName: string;
  apiUrl: string;
  /**
   * The service's address as people and outside clients reach it (config.publicUrl): what the protected-
   * resource metadata of a deployment's MCP and A2A names as where to get a credential; SLIPWAY_API_URL
   * may be an address only the app reaches.
   */
  publicUrl: string;
  agentCredential: string | null;
  /**
   * `credential` when the operator requires a protocol credential on every LangGraph deployment's MCP
   * and A2A (SLIPWAY_APPS_PROTOCOLS_AUTH): set after the app's env and secrets, which cannot undo it.
   */
  protocolsAuth?: 'credential' | null;
  databaseUrl: string | null;
  /** Where the app must listen: its own network namespace's every address, or the host's loopback. */
  listenHost: string;
  /**
   * The OpenTelemetry collector the service sends its traces to, as the app reaches it, when the operator
   * set one: the app's own traces join the same backend (docs/operations.md, "Traces").
   */
  otlp?: { endpoint: string; serviceName: string; resourceAttributes: Record<string, string> } | null;
}

/** OTEL_RESOURCE_ATTRIBUTES: key=value pairs, values percent-encoded as the specification says. */
function resourceAttributes(attributes: Record<string, string>): string {
  return Object.entries(attributes)
    .map(([key, value]) => `${key}=${encodeURIComponent(value)}`)
    .join(',');
}

export function runEnvironment(
  paths: AppPaths,
  appEnv: Record<string, string>,
  secrets: Record<string, string>,
  platform: PlatformVariables,
): Record<string, string> {
  return {
    // The standard OpenTelemetry variables first: an app's own env or secrets may set them otherwise.
    ...(platform.otlp
      ? {
          OTEL_EXPORTER_OTLP_ENDPOINT: platform.otlp.endpoint,
          OTEL_SERVICE_NAME: platform.otlp.serviceName,
          OTEL_RESOURCE_ATTRIBUTES: resourceAttributes(platform.otlp.resourceAttributes),
        }
      : {}),
    ...buildEnvironment(paths, appEnv, secrets),
    HOST: platform.listenHost,
    ...(paths.data ? { SLIPWAY_DATA_DIR: paths.data } : {}),
    SLIPWAY_DEPLOYMENT_ID: platform.deploymentId,
    SLIPWAY_REVISION_ID: platform.revisionId,
    // Empty for the deployment's own URL: set either way, so the app's env cannot name an endpoint.
    SLIPWAY_ENDPOINT: platform.endpoint ?? '',
    SLIPWAY_TRACING_PROJECT_ID: platform.tracingProjectId,
    SLIPWAY_TRACING_PROJECT_NAME: platform.tracingProjectName,
    SLIPWAY_API_URL: platform.apiUrl,
    SLIPWAY_PUBLIC_URL: platform.publicUrl,
    ...(platform.agentCredential ? { SLIPWAY_AGENT_CREDENTIAL: platform.agentCredential } : {}),
    ...(platform.protocolsAuth ? { SLIPWAY_PROTOCOLS_AUTH: platform.protocolsAuth } : {}),
    ...(platform.databaseUrl ? { DATABASE_URL: platform.databaseUrl } : {}),
  };
}
