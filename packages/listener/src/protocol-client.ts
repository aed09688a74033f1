/**
 * The agent's side of listener protocol version 1: the desired-state long-poll, status reports,
 * deletion confirmations and heartbeats, all outbound HTTPS with the listener credential. The service
 * never calls the cluster.
 *
 * It is the SDK's HTTP layer, not a copy: openapi-fetch over the types generated from the service's
 * OpenAPI document, the SDK's retrying fetch (timeouts, retries with back-off and Retry-After) and its
 * error, `SlipwayError` (status null: no answer at all). `permanentRefusal` sorts failures once, here:
 * an answer that retrying cannot change (400, 404, 409, 422: the service says no); everything else
 * (5xx, 429, a credential refused, the network) is worth another try after the agent's back-off.
 */
import createClient from 'openapi-fetch';
import type { paths } from '@slipway/sdk/api-types';
import type {
  DeploymentCondition as WireDeploymentCondition,
  EndpointReportBody,
  EndpointReportResult,
  HeartbeatBody,
  ReportBody,
  ReportResult,
} from '@slipway/sdk/listener-protocol';
import { createRetryingFetch, type RetryOptions } from '@slipway/sdk/retrying-fetch';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import { readDesiredState, type DesiredState } from './desired-state.ts';

export type Fetch = NonNullable<RetryOptions['fetch']>;

/** The protocol's bodies (@slipway/sdk's listener-protocol.ts: the same generated document as the client's paths). */
export type Report = ReportBody;
export type ReportAnswer = ReportResult;
export type Heartbeat = HeartbeatBody;
/** A deployment whose serving (DEPLOYED) revision is not healthy; the heartbeat leaves healthy ones out. */
export type DeploymentCondition = WireDeploymentCondition;

/** The service refused the request itself: the same request will be refused again. */
export function permanentRefusal(error: unknown): error is SlipwayError {
  if (!(error instanceof SlipwayError) || error.status === null) return false;
  const status = error.status;
  return status >= 400 && status < 500 && ![401, 403, 408, 429].includes(status);
}

export interface ProtocolClient {
  /** The desired state once it differs from `etag` (or at once without one); 'unchanged' after `waitSeconds`. */
  desiredState(
    etag: string | null,
    waitSeconds: number,
    signal: AbortSignal,
  ): Promise<{ state: DesiredState; etag: string | null } | 'unchanged'>;
  report(report: Report, signal: AbortSignal): Promise<ReportAnswer>;
  /** An endpoint serves its revision, or cannot (an addition to protocol 1: a service of before answers 404). */
  reportEndpoint(report: EndpointReportBody, signal: AbortSignal): Promise<EndpointReportResult>;
  confirmDeletion(deploymentId: string, signal: AbortSignal): Promise<void>;
  heartbeat(heartbeat: Heartbeat, signal: AbortSignal): Promise<void>;
}

export interface ProtocolClientOptions {
  readonly baseUrl: string;
  readonly listenerId: string;
  readonly credential: string;
  readonly fetch?: Fetch;
}

/** A short request that gets no answer within this long is given up (and retried). */
const REQUEST_TIMEOUT_MS = 30_000;

const CREDENTIAL_HINT =
  "check SLIPWAY_LISTENER_ID and SLIPWAY_LISTENER_CREDENTIAL: the credential may be revoked or be another listener's";

/** The answer's data; any other answer thrown as a SlipwayError (a refused credential says what to check). */
async function ok<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const result = await call;
  if (result.error === undefined && result.response.ok) return result.data as T;
  const error = SlipwayError.fromAnswer(result.response, result.error);
  if (error.status !== 401 && error.status !== 403) throw error;
  throw new SlipwayError({
    status: error.status,
    code: error.code,
    detail: `${error.detail} (${CREDENTIAL_HINT})`,
    requestId: error.requestId,
    body: error.body,
    url: error.url,
  });
}

export function createProtocolClient(options: ProtocolClientOptions): ProtocolClient {
  const retrying = (timeoutMs: number) => {
    const send = createRetryingFetch({ timeoutMs, ...(options.fetch ? { fetch: options.fetch } : {}) });
    return (request: Request) => send(request);
  };
  const api = createClient<paths, 'application/json'>({
    baseUrl: options.baseUrl.replace(/\/+$/, ''),
    headers: { authorization: `Bearer ${options.credential}` },
    fetch: retrying(REQUEST_TIMEOUT_MS),
  });
  const listener = { params: { path: { listener_id: options.listenerId } } };

  return {
    async desiredState(etag, waitSeconds, signal) {
      const wait = etag === null ? 0 : waitSeconds;
      const answer = await api.GET('/v2/listeners/{listener_id}/desired-state', {
        params: {
          path: { listener_id: options.listenerId },
          query: { wait },
          ...(etag === null ? {} : { header: { 'if-none-match': etag } }),
        },
        // A long-poll answers after up to `wait` seconds.
        fetch: retrying((wait + 30) * 1000),
        signal,
      });
      if (answer.response.status === 304) return 'unchanged';
      const body = await ok(Promise.resolve(answer));
      return { state: readDesiredState(body, options.listenerId), etag: answer.response.headers.get('etag') };
    },

    report: (report, signal) =>
      ok(api.POST('/v2/listeners/{listener_id}/reports', { ...listener, body: report, signal })),

    reportEndpoint: (report, signal) =>
      ok(api.POST('/v2/listeners/{listener_id}/endpoint-reports', { ...listener, body: report, signal })),

    async confirmDeletion(deploymentId, signal) {
      await ok(
        api.POST('/v2/listeners/{listener_id}/deletions', {
          ...listener,
          body: { deployment_id: deploymentId },
          signal,
        }),
      );
    },

    async heartbeat(heartbeat, signal) {
      await ok(api.POST('/v2/listeners/{listener_id}/heartbeat', { ...listener, body: heartbeat, signal }));
    },
  };
}
