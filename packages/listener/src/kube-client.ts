/**
 * The agent's few Kubernetes calls, on @kubernetes/client-node: server-side apply with the fixed
 * field manager, delete, list and watch by label, and the server's version. Errors come out as
 * `KubeError` with the API server's status code and message, and an apply the API server refuses
 * (`isRefusal`) as `ApplyRefusedError`, which the controller reports as `invalid_manifest` instead of
 * retrying it.
 *
 * An apply sends the manifest as written, as JSON, not through the library's typed model: the model
 * keeps only the fields it knows, so a field it does not (a misspelt `emptyDir.sizelimit`, a field
 * newer than the library) was dropped without a word (issue 25). The apply asks for
 * `fieldValidation=Strict`: the API server refuses a field its schema does not declare, in its words.
 */
import {
  ApiException,
  HttpMethod,
  KubernetesObjectApi,
  PatchStrategy,
  VersionApi,
  Watch,
  type KubeConfig,
} from '@kubernetes/client-node';
import {
  collectionPath,
  kindOf,
  keyOf,
  type ObjectRef,
  type ObservedObject,
  type PartialManifest,
} from './kube-objects.ts';
import { FIELD_MANAGER } from './manifest-names.ts';

export class KubeError extends Error {
  override name = 'KubeError';
  constructor(
    /** HTTP status of the API server's answer; 0 when there was none (connection refused, reset). */
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The API server refused the manifest itself (see `isRefusal`): applying it again cannot succeed. */
export class ApplyRefusedError extends KubeError {
  override name = 'ApplyRefusedError';
}

/**
 * The apply's namespace does not exist (404 of kind `namespaces`): not a refusal of the manifest, since
 * an operator may be creating it; the controller fails the revision once it has lasted a while.
 */
export class NamespaceMissingError extends KubeError {
  override name = 'NamespaceMissingError';
}

/** The part of an API server's Status body the agent reads. */
interface Status {
  readonly message: string;
  readonly reason?: string;
  readonly details?: { readonly kind?: string; readonly retryAfterSeconds?: number };
}

/** How the RBAC authorizer words a denial: `User "..." cannot patch resource "deployments" in ...`. */
const RBAC_DENIAL = /\bcannot [a-z]+ resource\b/;

/** Status reasons of an API server that is busy or in trouble, not of a request it refuses. */
const TRANSIENT_REASONS = new Set([
  'InternalError',
  'ServerTimeout',
  'Timeout',
  'TooManyRequests',
  'ServiceUnavailable',
]);

/**
 * Whether an answer refuses the request itself, so that sending it again is bound to be refused again
 * (issue 25: only 422 was, and a 1.26 server's 500 "field not declared in schema" for a field newer
 * than it was retried forever). Every 4xx and 5xx with a Status body is a refusal, except what is worth
 * another try:
 * - no answer (0), 408, 429, 502, 503, 504: the server or the way to it is busy or down;
 * - 409: a conflict of versions, which the next apply (with force) settles;
 * - 401, and a 403 of RBAC (`... cannot patch resource ...`): the agent's access, which an API server
 *   that just started denies for a moment and an operator can grant (the list-watch confirms a 403
 *   before deployments fail, `cluster-cache.ts`). Any other 403 refuses the object itself: an
 *   admission webhook or policy that denies it, a quota it would exceed;
 * - 404 of a namespace: an operator may be creating it (any other 404 is a kind the server does not
 *   serve, a refusal);
 * - a 5xx without a Status body (a proxy's page) or whose Status says the server is in trouble (a
 *   reason of `TRANSIENT_REASONS`, or `retryAfterSeconds`).
 */
export function isRefusal(code: number, status: Status | null): boolean {
  if (code === 403) return status !== null && !RBAC_DENIAL.test(status.message);
  if ([0, 401, 408, 409, 429, 502, 503, 504].includes(code)) return false;
  if (code === 404) return status?.details?.kind !== 'namespaces';
  if (code >= 400 && code < 500) return true;
  if (status === null) return false;
  return !TRANSIENT_REASONS.has(status.reason ?? '') && status.details?.retryAfterSeconds === undefined;
}

export interface WatchEvent {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  readonly object: ObservedObject;
}

/** The server's version, from GET /version. */
export interface ServerVersion {
  readonly major: number;
  readonly minor: number;
  /** As the server says it, `v1.31.4`. */
  readonly gitVersion: string;
}

export interface ApplyOptions {
  /** The field manager (default the listener's own). */
  readonly fieldManager?: string;
  /** Take fields other managers own (default true: the listener owns its objects). */
  readonly force?: boolean;
}

export interface KubeClient {
  /** Server-side apply of the manifest as written, refusing fields the server does not declare. */
  apply(manifest: PartialManifest, options?: ApplyOptions): Promise<void>;
  version(): Promise<ServerVersion>;
  /**
   * Whether the API server serves `kind` in `apiVersion`, by the API's discovery (`GET /apis/<group>/<version>`):
   * false when the group or version is not served (404) or does not have the kind.
   */
  serves(apiVersion: string, kind: string): Promise<boolean>;
  /** Deletes in the foreground: a workload goes only after its pods. A missing object is fine. */
  remove(target: ObjectRef): Promise<void>;
  list(
    kind: string,
    namespace: string,
    labelSelector: string,
  ): Promise<{ items: ObservedObject[]; resourceVersion: string }>;
  /** Streams events until the server ends the watch (`done(null)`) or it fails (`done(error)`); returns its abort. */
  watch(
    kind: string,
    namespace: string,
    labelSelector: string,
    resourceVersion: string,
    onEvent: (event: WatchEvent) => void,
    done: (error: KubeError | null) => void,
  ): Promise<() => void>;
}

/** The Status an API server answered with, or null when the body is not one. */
function statusOf(error: ApiException<unknown>): Status | null {
  if (typeof error.body !== 'string') return null;
  try {
    const parsed: unknown = JSON.parse(error.body);
    if (
      parsed !== null &&
      typeof parsed === 'object' &&
      (parsed as { kind?: unknown }).kind === 'Status' &&
      typeof (parsed as { message?: unknown }).message === 'string'
    )
      return parsed as Status;
  } catch {
    // Not JSON: no Status.
  }
  return null;
}

/** The API server's own words: its Status message when it sent one. */
function messageOf(error: ApiException<unknown>): string {
  const status = statusOf(error);
  if (status !== null) return status.message;
  const body = error.body;
  if (typeof body === 'string' && body.trim() !== '') return `HTTP ${error.code}: ${body.trim().slice(0, 2000)}`;
  return `HTTP ${error.code}`;
}

function toKubeError(error: unknown, what: string): KubeError {
  if (error instanceof KubeError) return error;
  if (error instanceof ApiException) return new KubeError(error.code, `${what}: ${messageOf(error)}`);
  return new KubeError(0, `${what}: ${error instanceof Error ? error.message : String(error)}`);
}

/** The object API with an apply of the manifest as written (the library's `patch` goes through its typed model). */
class UnstructuredObjectApi extends KubernetesObjectApi {
  /** Whether the API's discovery lists `kind` in `apiVersion` (throws an ApiException 404 for a group not served). */
  async servesKind(apiVersion: string, kind: string): Promise<boolean> {
    // Read afresh each time: the library keeps what discovery said, and CRDs come and go on a live cluster.
    delete this.apiVersionResourceCache[apiVersion];
    return (await this.resource(apiVersion, kind)) !== undefined;
  }

  async applyAsWritten(manifest: PartialManifest, fieldManager: string, force: boolean): Promise<void> {
    const kind = kindOf(manifest.kind);
    if (!kind) throw new Error(`not a kind the listener manages: ${manifest.kind}`);
    const path = `${collectionPath(kind, manifest.metadata.namespace)}/${encodeURIComponent(manifest.metadata.name)}`;
    const request = this.configuration.baseServer.makeRequestContext(path, HttpMethod.PATCH);
    request.setHeaderParam('Accept', 'application/json, */*;q=0.8');
    request.setHeaderParam('Content-Type', PatchStrategy.ServerSideApply);
    request.setQueryParam('fieldManager', fieldManager);
    if (force) request.setQueryParam('force', 'true');
    request.setQueryParam('fieldValidation', 'Strict');
    // JSON is YAML: the apply content type takes it as it is.
    request.setBody(JSON.stringify(manifest));
    await this.requestPromise(request);
  }
}

export function createKubeClient(kubeConfig: KubeConfig): KubeClient {
  const api = kubeConfig.makeApiClient(UnstructuredObjectApi);
  const versionApi = kubeConfig.makeApiClient(VersionApi);
  const watcher = new Watch(kubeConfig);

  const kind = (name: string) => {
    const found = kindOf(name);
    if (!found) throw new Error(`not a kind the listener manages: ${name}`);
    return found;
  };

  return {
    async apply(manifest, options = {}) {
      const what = `apply ${keyOf({ kind: manifest.kind, namespace: manifest.metadata.namespace, name: manifest.metadata.name })}`;
      try {
        // force: the listener owns these objects; a field another manager took over is taken back.
        await api.applyAsWritten(manifest, options.fieldManager ?? FIELD_MANAGER, options.force ?? true);
      } catch (error) {
        if (error instanceof ApiException && error.code === 404 && statusOf(error)?.details?.kind === 'namespaces')
          throw new NamespaceMissingError(404, `${what}: ${messageOf(error)} (HTTP 404)`);
        if (error instanceof ApiException && isRefusal(error.code, statusOf(error)))
          throw new ApplyRefusedError(
            error.code,
            `${what}: ${messageOf(error)}${error.code === 422 ? '' : ` (HTTP ${error.code})`}`,
          );
        throw toKubeError(error, what);
      }
    },

    async version() {
      try {
        const info = await versionApi.getCode();
        // Some distributions write `28+` (a provider's build of 1.28): the number is what counts.
        return {
          major: Number.parseInt(info.major, 10),
          minor: Number.parseInt(info.minor, 10),
          gitVersion: info.gitVersion,
        };
      } catch (error) {
        throw toKubeError(error, 'read the API server version');
      }
    },

    async serves(apiVersion, kindName) {
      try {
        return await api.servesKind(apiVersion, kindName);
      } catch (error) {
        if (error instanceof ApiException && error.code === 404) return false;
        throw toKubeError(error, `discover ${apiVersion}`);
      }
    },

    async remove(target) {
      try {
        await api.delete(
          {
            apiVersion: target.apiVersion,
            kind: target.kind,
            metadata: { name: target.name, namespace: target.namespace },
          },
          undefined,
          undefined,
          undefined,
          undefined,
          'Foreground',
        );
      } catch (error) {
        if (error instanceof ApiException && error.code === 404) return;
        throw toKubeError(error, `delete ${keyOf(target)}`);
      }
    },

    async list(kindName, namespace, labelSelector) {
      const k = kind(kindName);
      try {
        const list = await api.list(
          k.apiVersion,
          k.kind,
          namespace,
          undefined,
          undefined,
          undefined,
          undefined,
          labelSelector,
        );
        // List items come without kind and apiVersion; the rest of the agent keys objects by kind.
        return {
          items: list.items.map((item) => ({
            ...item,
            apiVersion: k.apiVersion,
            kind: k.kind,
            metadata: item.metadata ?? {},
          })),
          resourceVersion: list.metadata?.resourceVersion ?? '',
        };
      } catch (error) {
        throw toKubeError(error, `list ${k.plural} in ${namespace}`);
      }
    },

    async watch(kindName, namespace, labelSelector, resourceVersion, onEvent, done) {
      const k = kind(kindName);
      const controller = await watcher.watch(
        collectionPath(k, namespace),
        { labelSelector, resourceVersion, allowWatchBookmarks: true },
        (type: string, object: ObservedObject) =>
          // An ERROR event carries a Status, not an object of the kind.
          onEvent({
            type: type as WatchEvent['type'],
            object: type === 'ERROR' ? object : { ...object, apiVersion: k.apiVersion, kind: k.kind },
          }),
        (error: unknown) => {
          if (error === null || error === undefined) done(null);
          else {
            const status =
              typeof (error as { statusCode?: unknown }).statusCode === 'number'
                ? (error as { statusCode: number }).statusCode
                : 0;
            done(
              new KubeError(
                status,
                // eslint-disable-next-line @typescript-eslint/no-base-to-string -- `error` is unknown, only narrowed to {} by the null test: String() is the fallback for a non-Error
                `watch ${k.plural} in ${namespace}: ${error instanceof Error ? error.message : String(error)}`,
              ),
            );
          }
        },
      );
      return () => controller.abort();
    },
  };
}
