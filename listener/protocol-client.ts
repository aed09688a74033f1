/**
 * The agent's side of listener protocol version 1: the desired-state long-poll, status reports,
 * deletion confirmations and heartbeats, all outbound HTTPS with the listener credential. The service
 * never calls the cluster.
 *
 * Failures are sorted once, here: `ProtocolError` with `permanent` true is an answer that retrying
 * cannot change (400, 404, 409: the service says no), everything else (5xx, 429, the network) is
 * worth another try after a back-off.
 */
import { parseDesiredState, type DesiredState, type ReportedStatus } from './desired-state.ts';
import type { FailureReason } from './rollout-status.ts';

export type Fetch = typeof globalThis.fetch;

export class ProtocolHttpError extends Error {
  override name = 'ProtocolHttpError';
  constructor(
    /** 0: no answer at all. */
    readonly status: number,
    message: string,
  ) {
    super(message);
  }

  /** The service refused the request itself: the same request will be refused again. */
  get permanent(): boolean {
    return (
      this.status >= 400 &&
      this.status < 500 &&
      this.status !== 408 &&
      this.status !== 429 &&
      this.status !== 401 &&
      this.status !== 403
    );
  }
}

export interface Report {
  readonly revision_id: string;
  readonly status: ReportedStatus;
  readonly failure_reason?: FailureReason;
  readonly message?: string;
}

export interface ReportAnswer {
  readonly applied: boolean;
  readonly status: string;
}

/** A deployment whose serving (DEPLOYED) revision is not healthy; the heartbeat leaves healthy ones out. */
export interface DeploymentCondition {
  readonly deployment_id: string;
  readonly revision_id: string;
  readonly condition: 'update_failed' | 'crash_loop';
  readonly reason: FailureReason;
  readonly message: string;
}

export interface Heartbeat {
  readonly version: string;
  readonly namespaces: readonly string[];
  readonly message?: string;
  /** Every deployment not healthy, as seen at `observed_at` (ISO 8601); both left out before the first look. */
  readonly deployments?: readonly DeploymentCondition[];
  readonly observed_at?: string;
}

export interface ProtocolClient {
  /** The desired state once it differs from `etag` (or at once without one); 'unchanged' after `waitSeconds`. */
  desiredState(
    etag: string | null,
    waitSeconds: number,
    signal: AbortSignal,
  ): Promise<{ state: DesiredState; etag: string | null } | 'unchanged'>;
  report(report: Report, signal: AbortSignal): Promise<ReportAnswer>;
  confirmDeletion(deploymentId: string, signal: AbortSignal): Promise<void>;
  heartbeat(heartbeat: Heartbeat, signal: AbortSignal): Promise<void>;
}

export interface ProtocolClientOptions {
  readonly baseUrl: string;
  readonly listenerId: string;
  readonly credential: string;
  readonly fetch: Fetch;
}

/** A short request that gets no answer within this long is given up and tried again. */
const REQUEST_TIMEOUT_MS = 30_000;

async function detailOf(response: Response): Promise<string> {
  const text = await response.text().catch(() => '');
  try {
    const body: unknown = JSON.parse(text);
    if (body !== null && typeof body === 'object') {
      const detail = (body as { detail?: unknown }).detail;
      if (typeof detail === 'string') return detail;
      if (detail !== undefined) return JSON.stringify(detail).slice(0, 500);
    }
  } catch {
    // Not JSON: say what came.
  }
  return text.slice(0, 500) || response.statusText;
}

export function createProtocolClient(options: ProtocolClientOptions): ProtocolClient {
  const base = `${options.baseUrl}/v2/listeners/${encodeURIComponent(options.listenerId)}`;
  const headers = { authorization: `Bearer ${options.credential}`, accept: 'application/json' };

  async function call(
    method: 'GET' | 'POST',
    path: string,
    body: unknown,
    extraHeaders: Record<string, string>,
    signal: AbortSignal,
    timeoutMs: number,
  ): Promise<Response> {
    const what = `${method} ${path.replace(/\?.*$/, '')}`;
    let response: Response;
    try {
      response = await options.fetch(`${base}${path}`, {
        method,
        headers: { ...headers, ...extraHeaders, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
      });
    } catch (error) {
      throw new ProtocolHttpError(0, `${what}: ${error instanceof Error ? error.message : String(error)}`);
    }
    if (response.status >= 400) {
      const detail = await detailOf(response);
      const hint =
        response.status === 401 || response.status === 403
          ? " (check SLIPWAY_LISTENER_ID and SLIPWAY_LISTENER_CREDENTIAL: the credential may be revoked or be another listener's)"
          : '';
      throw new ProtocolHttpError(response.status, `${what}: HTTP ${response.status}: ${detail}${hint}`);
    }
    return response;
  }

  return {
    async desiredState(etag, waitSeconds, signal) {
      const wait = etag === null ? 0 : waitSeconds;
      const response = await call(
        'GET',
        `/desired-state?wait=${wait}`,
        undefined,
        etag === null ? {} : { 'if-none-match': etag },
        signal,
        (wait + 30) * 1000,
      );
      if (response.status === 304) {
        await response.body?.cancel();
        return 'unchanged';
      }
      const body: unknown = await response.json();
      return { state: parseDesiredState(body, options.listenerId), etag: response.headers.get('etag') };
    },

    async report(report, signal) {
      const response = await call('POST', '/reports', report, {}, signal, REQUEST_TIMEOUT_MS);
      const body = (await response.json().catch(() => ({}))) as Partial<ReportAnswer>;
      return { applied: body.applied === true, status: typeof body.status === 'string' ? body.status : report.status };
    },

    async confirmDeletion(deploymentId, signal) {
      const response = await call(
        'POST',
        '/deletions',
        { deployment_id: deploymentId },
        {},
        signal,
        REQUEST_TIMEOUT_MS,
      );
      await response.body?.cancel();
    },

    async heartbeat(heartbeat, signal) {
      const response = await call('POST', '/heartbeat', heartbeat, {}, signal, REQUEST_TIMEOUT_MS);
      await response.body?.cancel();
    },
  };
}
