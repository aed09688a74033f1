/**
 * The Slipway API client: every operation of the service's OpenAPI document through `api`
 * (openapi-fetch over the generated types), and named methods for what users do most, which throw
 * `SlipwayError` instead of returning an error value.
 *
 * ```ts
 * const slipway = new SlipwayClient({ baseUrl: 'http://127.0.0.1:8124', apiKey: process.env.SLIPWAY_API_KEY });
 * const deployment = await slipway.deployments.get(id);
 * const revision = await slipway.waitForRevision(deployment.id, deployment.latest_revision_id!);
 * ```
 */
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from './api-types.ts';
import type {
  ApiKeyCreate,
  DeploymentEndpoint,
  PreviewSettings,
  PullRequestPreview,
  DeploymentCreate,
  DeploymentPatch,
  DeploymentQuery,
  ListenerCreate,
  LogType,
  ProtocolCredentialCreate,
  Query,
  Upload,
} from './api-aliases.ts';
import { collect, iterateItems, iteratePages, type PageFetcher } from './page-iterator.ts';
import { followLog, waitForRevision, type FollowLogOptions, type WaitOptions } from './revision-follow.ts';
import { createRetryingFetch, type RetryingFetch, type RetryOptions } from './retrying-fetch.ts';
import { parseWarnings } from './response-warnings.ts';
import { SlipwayError } from './slipway-error.ts';
import { sleep } from './sleep.ts';

export interface SlipwayClientOptions extends RetryOptions {
  /** The service's address, e.g. `http://127.0.0.1:8124`. */
  baseUrl: string;
  /** Sent as X-Api-Key. */
  apiKey?: string | null;
  /** Sent as X-Tenant-Id: the workspace an organization key acts on. */
  tenantId?: string | null;
  /** Sent as User-Agent. */
  userAgent?: string;
  /**
   * Told each warning of an answer: a body field or query parameter the service does not know and
   * ignored (`unknown field "secretz"; did you mean "secrets"?`), say from a client newer than it.
   */
  onWarning?: (warning: string, response: Response) => void;
}

/** What an openapi-fetch call resolves to: data on success, error otherwise. */
type Answer = { data?: unknown; error?: unknown; response: Response };
/** The data of a successful answer; void for answers without a body (204). */
type DataOf<R extends Answer> = [Exclude<R['data'], undefined>] extends [never] ? void : Exclude<R['data'], undefined>;

/** The data of a successful answer; any other answer is thrown as a SlipwayError. */
export async function ok<R extends Answer>(call: Promise<R>): Promise<DataOf<R>> {
  const result = await call;
  if (result.error !== undefined || !result.response.ok) throw SlipwayError.fromAnswer(result.response, result.error);
  // The failing branch of openapi-fetch's union was thrown above; TypeScript cannot narrow the generic.
  return result.data as DataOf<R>;
}

const path = <T extends Record<string, string>>(params: T) => ({ params: { path: params } });

/**
 * The data plane's message when it could not start `revisionId` at the endpoint since the endpoint was
 * last moved; null when it has not said so. `events` is a deployment's events, newest first: the scan
 * stops at the newest move of the endpoint, so a failure of an earlier move to the same revision is not
 * taken for this one's.
 */
export function endpointFailure(
  events: readonly { type: string; data: Record<string, unknown> }[],
  name: string,
  revisionId: string,
): string | null {
  for (const e of events) {
    if (e.data.endpoint !== name) continue;
    if (e.type === 'deployment.endpoint_set') return null;
    if (e.type === 'deployment.endpoint_failed' && e.data.revision_id === revisionId) return String(e.data.message);
  }
  return null;
}

export class SlipwayClient {
  /** Every operation of the API, typed from its OpenAPI document: `await ok(client.api.GET('/v2/listeners'))`. */
  readonly api: Client<paths, 'application/json'>;
  readonly baseUrl: string;
  /** The transport (timeout, retries), for requests outside `api` such as an upload URL. */
  readonly fetch: RetryingFetch;

  constructor(readonly options: SlipwayClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetch = createRetryingFetch(options);
    const headers: Record<string, string> = {};
    if (options.apiKey) headers['x-api-key'] = options.apiKey;
    if (options.tenantId) headers['x-tenant-id'] = options.tenantId;
    if (options.userAgent) headers['user-agent'] = options.userAgent;
    this.api = createClient<paths, 'application/json'>({
      baseUrl: this.baseUrl,
      headers,
      fetch: async (request) => {
        const response = await this.fetch(request);
        if (options.onWarning)
          for (const warning of parseWarnings(response.headers.get('warning'))) options.onWarning(warning, response);
        return response;
      },
    });
  }

  /** Pages, items and the whole list of a paged operation, from one function that fetches a page. */
  private lister<T>(fetchPage: PageFetcher<T>) {
    return {
      pages: (options?: { offset?: number; limit?: number }) => iteratePages(fetchPage, options),
      all: () => iterateItems(iteratePages(fetchPage)),
      list: (options?: { offset?: number; limit?: number }): Promise<T[]> =>
        collect(iterateItems(iteratePages(fetchPage, options))),
    };
  }

  readonly deployments = {
    page: (query: DeploymentQuery = {}) => ok(this.api.GET('/v2/deployments', { params: { query } })),
    /** Every deployment matching `query`, page by page. */
    pages: (query: Omit<DeploymentQuery, 'offset' | 'limit'> = {}, options?: { offset?: number; limit?: number }) =>
      this.lister((offset, limit) => this.deployments.page({ ...query, offset, limit })).pages(options),
    all: (query: Omit<DeploymentQuery, 'offset' | 'limit'> = {}) =>
      this.lister((offset, limit) => this.deployments.page({ ...query, offset, limit })).all(),
    get: (deploymentId: string) =>
      ok(this.api.GET('/v2/deployments/{deployment_id}', path({ deployment_id: deploymentId }))),
    /** The deployment of this name in the workspace, or null. */
    findByName: async (name: string) => (await this.deployments.page({ name, limit: 1 })).resources[0] ?? null,
    create: (body: DeploymentCreate) => ok(this.api.POST('/v2/deployments', { body })),
    update: (deploymentId: string, body: DeploymentPatch) =>
      ok(this.api.PATCH('/v2/deployments/{deployment_id}', { ...path({ deployment_id: deploymentId }), body })),
    delete: (deploymentId: string) =>
      ok(this.api.DELETE('/v2/deployments/{deployment_id}', path({ deployment_id: deploymentId }))),
    events: (deploymentId: string) =>
      this.lister((offset, limit) =>
        ok(
          this.api.GET('/v2/deployments/{deployment_id}/events', {
            params: { path: { deployment_id: deploymentId }, query: { offset, limit } },
          }),
        ),
      ),
  };

  readonly revisions = {
    page: (deploymentId: string, query: Query<'/v2/deployments/{deployment_id}/revisions', 'get'> = {}) =>
      ok(
        this.api.GET('/v2/deployments/{deployment_id}/revisions', {
          params: { path: { deployment_id: deploymentId }, query },
        }),
      ),
    pages: (deploymentId: string, options?: { offset?: number; limit?: number }) =>
      this.lister((offset, limit) => this.revisions.page(deploymentId, { offset, limit })).pages(options),
    all: (deploymentId: string) =>
      this.lister((offset, limit) => this.revisions.page(deploymentId, { offset, limit })).all(),
    get: (deploymentId: string, revisionId: string) =>
      ok(
        this.api.GET(
          '/v2/deployments/{deployment_id}/revisions/{revision_id}',
          path({ deployment_id: deploymentId, revision_id: revisionId }),
        ),
      ),
    /** Makes a new revision from what `revisionId` ran (rollback); answers the deployment. */
    redeploy: (deploymentId: string, revisionId: string) =>
      ok(
        this.api.POST(
          '/v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy',
          path({ deployment_id: deploymentId, revision_id: revisionId }),
        ),
      ),
    interrupt: (deploymentId: string, revisionId: string) =>
      ok(
        this.api.POST(
          '/v2/deployments/{deployment_id}/revisions/{revision_id}/interrupt',
          path({ deployment_id: deploymentId, revision_id: revisionId }),
        ),
      ),
  };

  readonly logs = {
    /** One page of a revision's log, oldest first; pass `next_cursor` back as `cursor` for the lines after it. */
    page: (deploymentId: string, revisionId: string, query: { type?: LogType; cursor?: string; limit?: number } = {}) =>
      ok(
        this.api.GET('/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', {
          params: { path: { deployment_id: deploymentId, revision_id: revisionId }, query },
        }),
      ),
    /** The log's lines and the revision's status changes as they happen, until the log ends (docs/logs.md). */
    follow: (deploymentId: string, revisionId: string, options: FollowLogOptions = {}) =>
      followLog(this, deploymentId, revisionId, options),
    /** The stream of a followed log (text/event-stream), for followLog. */
    openStream: async (
      deploymentId: string,
      revisionId: string,
      query: { type: LogType; cursor?: string },
      signal?: AbortSignal,
    ) => {
      const stream = await ok(
        this.api.GET('/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', {
          params: { path: { deployment_id: deploymentId, revision_id: revisionId }, query: { ...query, follow: true } },
          headers: { accept: 'text/event-stream' },
          parseAs: 'stream',
          ...(signal ? { signal } : {}),
        }),
      );
      if (!stream)
        throw new SlipwayError({
          status: null,
          code: 'connection_failed',
          detail: 'the log stream came without a body',
          url: this.baseUrl,
        });
      return stream;
    },
  };

  /** Waits for a revision to reach a final state by following its build log's event stream (no polling). */
  waitForRevision(deploymentId: string, revisionId: string, options: WaitOptions = {}) {
    return waitForRevision(this, deploymentId, revisionId, options);
  }

  readonly uploads = {
    /** Uploads a gzipped tarball of a source; its source_tarball_path goes into source_revision_config. */
    create: (tarball: Uint8Array<ArrayBuffer>) =>
      ok(
        this.api.POST('/v2/uploads', {
          body: tarball,
          bodySerializer: (body: unknown) => body,
          headers: { 'content-type': 'application/gzip' },
        }),
      ),
    /** The largest tarball the service takes (`max_bytes`) and the setting that says so. */
    limits: () => ok(this.api.GET('/v2/uploads/limits')),
    /** A single-use URL for uploading the next source of a deployment (the flow of `slipway deploy`). */
    url: (deploymentId: string) =>
      ok(this.api.POST('/v2/deployments/{deployment_id}/upload-url', path({ deployment_id: deploymentId }))),
    /** PUTs a tarball to an upload URL: the URL is the credential, so no API key goes with it; sent once (the URL is single-use). */
    put: async (uploadUrl: string, tarball: Uint8Array<ArrayBuffer>) => {
      const request = new Request(uploadUrl, {
        method: 'PUT',
        body: tarball,
        headers: { 'content-type': 'application/gzip' },
      });
      const response = await this.fetch(request, { retry: false });
      if (!response.ok) throw await SlipwayError.fromResponse(response);
      // The document's type of this answer; the service's own JSON, so it is not checked again here.
      return (await response.json()) as Upload;
    },
  };

  readonly listeners = {
    ...this.lister((offset, limit) => ok(this.api.GET('/v2/listeners', { params: { query: { offset, limit } } }))),
    get: (listenerId: string) => ok(this.api.GET('/v2/listeners/{listener_id}', path({ listener_id: listenerId }))),
    create: (body: ListenerCreate) => ok(this.api.POST('/v2/listeners', { body })),
    delete: (listenerId: string) =>
      ok(this.api.DELETE('/v2/listeners/{listener_id}', path({ listener_id: listenerId }))),
  };

  readonly apiKeys = {
    ...this.lister((offset, limit) => ok(this.api.GET('/v2/api-keys', { params: { query: { offset, limit } } }))),
    /** The answer holds the key itself, shown this once. */
    create: (body: ApiKeyCreate) => ok(this.api.POST('/v2/api-keys', { body })),
    revoke: (apiKeyId: string) => ok(this.api.DELETE('/v2/api-keys/{api_key_id}', path({ api_key_id: apiKeyId }))),
  };

  /**
   * Credentials for a deployment's MCP (/mcp) and A2A (/a2a) endpoints, which it requires with
   * SLIPWAY_PROTOCOLS_AUTH=credential. Minting and revoking need an admin key; a list never holds the
   * credentials themselves.
   */
  readonly protocolCredentials = {
    /** One page of the deployment's credentials, newest first, revoked ones included. */
    page: (deploymentId: string, query: { offset?: number; limit?: number } = {}) =>
      ok(
        this.api.GET('/v2/deployments/{deployment_id}/protocol-credentials', {
          params: { path: { deployment_id: deploymentId }, query },
        }),
      ),
    pages: (deploymentId: string, options?: { offset?: number; limit?: number }) =>
      this.lister((offset, limit) => this.protocolCredentials.page(deploymentId, { offset, limit })).pages(options),
    all: (deploymentId: string) =>
      this.lister((offset, limit) => this.protocolCredentials.page(deploymentId, { offset, limit })).all(),
    list: (deploymentId: string, options?: { offset?: number; limit?: number }) =>
      this.lister((offset, limit) => this.protocolCredentials.page(deploymentId, { offset, limit })).list(options),
    /** The answer holds the credential (`slwp_...`), shown this once. */
    create: (deploymentId: string, body: ProtocolCredentialCreate = {}) =>
      ok(
        this.api.POST('/v2/deployments/{deployment_id}/protocol-credentials', {
          ...path({ deployment_id: deploymentId }),
          body,
        }),
      ),
    /** The deployment refuses the credential within 10 seconds (its server keeps an answer that long). */
    revoke: (deploymentId: string, credentialId: string) =>
      ok(
        this.api.DELETE(
          '/v2/deployments/{deployment_id}/protocol-credentials/{credential_id}',
          path({ deployment_id: deploymentId, credential_id: credentialId }),
        ),
      ),
  };

  /**
   * A deployment's requests, errors by class, latency percentiles, CPU and memory as series, per route
   * (its own URL and each endpoint) and per revision, over `window` (`1m` to `1h`, default `15m`) in
   * steps of `step` (a multiple of `10s`). Kept by the replica that runs the app edge, for the last hour.
   */
  metrics(deploymentId: string, query: { window?: string; step?: string } = {}) {
    return ok(
      this.api.GET('/v2/deployments/{deployment_id}/metrics', {
        params: { path: { deployment_id: deploymentId }, query },
      }),
    );
  }

  /**
   * Endpoints of a deployment: named addresses pinned to its revisions, each at its own URL
   * (`<slug>--<name>.<apps domain>`). Served by the service's own data plane only.
   */
  readonly endpoints = {
    /** The deployment's endpoints, by name. */
    list: async (deploymentId: string): Promise<DeploymentEndpoint[]> =>
      (await ok(this.api.GET('/v2/deployments/{deployment_id}/endpoints', path({ deployment_id: deploymentId }))))
        .resources,
    get: (deploymentId: string, name: string) =>
      ok(
        this.api.GET(
          '/v2/deployments/{deployment_id}/endpoints/{endpoint_name}',
          path({ deployment_id: deploymentId, endpoint_name: name }),
        ),
      ),
    /** Creates the endpoint at the revision, or moves it there. */
    set: (deploymentId: string, name: string, revisionId: string) =>
      ok(
        this.api.PUT('/v2/deployments/{deployment_id}/endpoints/{endpoint_name}', {
          ...path({ deployment_id: deploymentId, endpoint_name: name }),
          body: { revision_id: revisionId },
        }),
      ),
    /** Moves `to` to the revision `from` is pinned to: the same build, not built again. */
    promote: async (deploymentId: string, from: string, to: string) =>
      this.endpoints.set(deploymentId, to, (await this.endpoints.get(deploymentId, from)).revision_id),
    delete: (deploymentId: string, name: string) =>
      ok(
        this.api.DELETE(
          '/v2/deployments/{deployment_id}/endpoints/{endpoint_name}',
          path({ deployment_id: deploymentId, endpoint_name: name }),
        ),
      ),
    /**
     * Sends `weight` percent (1-99) of the endpoint's clients to `revisionId`, or changes the split; each
     * client and LangGraph thread stays on one revision. `rollback` takes it back by itself when the revision
     * does worse (docs/app-urls.md, "Traffic split").
     */
    split: (
      deploymentId: string,
      name: string,
      revisionId: string,
      weight: number,
      rollback?: {
        max_error_rate_increase?: number;
        max_p99_increase_ms?: number | null;
        window_seconds?: number;
        min_requests?: number;
      } | null,
    ) =>
      ok(
        this.api.PUT('/v2/deployments/{deployment_id}/endpoints/{endpoint_name}/split', {
          ...path({ deployment_id: deploymentId, endpoint_name: name }),
          body: { revision_id: revisionId, weight, ...(rollback === undefined ? {} : { rollback }) },
        }),
      ),
    /** Takes the endpoint's split back: every client to its revision again. */
    unsplit: (deploymentId: string, name: string) =>
      ok(
        this.api.DELETE(
          '/v2/deployments/{deployment_id}/endpoints/{endpoint_name}/split',
          path({ deployment_id: deploymentId, endpoint_name: name }),
        ),
      ),
    /**
     * Waits until the data plane serves `revisionId` at the endpoint (the answer), or reports that it
     * could not start it (a `deployment.endpoint_failed` event since the wait began: thrown as an Error
     * with its message), or the endpoint is moved elsewhere or deleted (thrown). Polls every `everyMs`.
     */
    waitServed: async (
      deploymentId: string,
      name: string,
      revisionId: string,
      options: { everyMs?: number; signal?: AbortSignal } = {},
    ): Promise<DeploymentEndpoint> => {
      for (;;) {
        const endpoint = await this.endpoints.get(deploymentId, name);
        if (endpoint.served_revision_id === revisionId) return endpoint;
        if (endpoint.revision_id !== revisionId)
          throw new Error(`endpoint ${name} was moved to revision ${endpoint.revision_id} meanwhile`);
        const events = await ok(
          this.api.GET('/v2/deployments/{deployment_id}/events', {
            params: { path: { deployment_id: deploymentId }, query: { order: 'desc', limit: 50 } },
          }),
        );
        const failure = endpointFailure(events.resources, name, revisionId);
        if (failure !== null) throw new Error(`revision ${revisionId} did not start at endpoint ${name}: ${failure}`);
        await sleep(options.everyMs ?? 1000, options.signal);
      }
    },
  };

  /**
   * Pull-request previews of a codehost deployment with build_on_push: made and removed by the code host's
   * pull_request webhooks, each served at the endpoint `pr-<number>`.
   */
  readonly previews = {
    /** Open pull requests with (or refused) a preview, oldest first. */
    list: async (deploymentId: string): Promise<PullRequestPreview[]> =>
      (await ok(this.api.GET('/v2/deployments/{deployment_id}/previews', path({ deployment_id: deploymentId }))))
        .resources,
    settings: (deploymentId: string): Promise<PreviewSettings> =>
      ok(this.api.GET('/v2/deployments/{deployment_id}/preview-settings', path({ deployment_id: deploymentId }))),
    /** An admin key only; fields left out keep their value. */
    updateSettings: (deploymentId: string, settings: { max_previews?: number | null; fork_secrets?: boolean }) =>
      ok(
        this.api.PATCH('/v2/deployments/{deployment_id}/preview-settings', {
          ...path({ deployment_id: deploymentId }),
          body: settings,
        }),
      ),
  };

  readonly integrations = {
    ...this.lister((offset, limit) =>
      ok(this.api.GET('/v1/integrations/forge/codehost', { params: { query: { offset, limit } } })),
    ),
    get: (integrationId: string) =>
      ok(this.api.GET('/v1/integrations/forge/codehost/{integration_id}', path({ integration_id: integrationId }))),
    delete: (integrationId: string) =>
      ok(this.api.DELETE('/v1/integrations/forge/codehost/{integration_id}', path({ integration_id: integrationId }))),
    repositories: (integrationId: string) =>
      ok(
        this.api.GET('/v1/integrations/forge/codehost/{integration_id}/repos', path({ integration_id: integrationId })),
      ),
    deliveries: (integrationId: string) =>
      this.lister((offset, limit) =>
        ok(
          this.api.GET('/v1/integrations/forge/codehost/{integration_id}/deliveries', {
            params: { path: { integration_id: integrationId }, query: { offset, limit } },
          }),
        ),
      ),
  };
}
