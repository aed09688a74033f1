/**
 * The agent's few Kubernetes calls, on @kubernetes/client-node: server-side apply with the fixed
 * field manager, delete, list and watch by label. Errors come out as `KubeError` with the API
 * server's status code and message, and a 422 on apply as `ApplyRefusedError`, which the controller
 * reports as `invalid_manifest` instead of retrying it.
 */
import { ApiException, KubernetesObjectApi, PatchStrategy, Watch, type KubeConfig } from '@kubernetes/client-node';
import { collectionPath, kindOf, keyOf, type Manifest, type ObjectRef, type ObservedObject } from './kube-objects.ts';
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

/** The API server refused the manifest itself (422 Invalid): applying it again cannot succeed. */
export class ApplyRefusedError extends KubeError {
  override name = 'ApplyRefusedError';
}

export interface WatchEvent {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  readonly object: ObservedObject;
}

export interface KubeClient {
  apply(manifest: Manifest): Promise<void>;
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

/** The API server's own words: its Status message when it sent one. */
function messageOf(error: ApiException<unknown>): string {
  const body = error.body;
  if (typeof body === 'string') {
    try {
      const parsed: unknown = JSON.parse(body);
      if (
        parsed !== null &&
        typeof parsed === 'object' &&
        typeof (parsed as { message?: unknown }).message === 'string'
      )
        return (parsed as { message: string }).message;
    } catch {
      // Not JSON: the text itself is the best there is.
    }
    if (body.trim() !== '') return body.trim().slice(0, 2000);
  }
  return `HTTP ${error.code}`;
}

function toKubeError(error: unknown, what: string): KubeError {
  if (error instanceof KubeError) return error;
  if (error instanceof ApiException) return new KubeError(error.code, `${what}: ${messageOf(error)}`);
  return new KubeError(0, `${what}: ${error instanceof Error ? error.message : String(error)}`);
}

export function createKubeClient(kubeConfig: KubeConfig): KubeClient {
  const api = KubernetesObjectApi.makeApiClient(kubeConfig);
  const watcher = new Watch(kubeConfig);

  const kind = (name: string) => {
    const found = kindOf(name);
    if (!found) throw new Error(`not a kind the listener manages: ${name}`);
    return found;
  };

  return {
    async apply(manifest) {
      const what = `apply ${keyOf({ kind: manifest.kind, namespace: manifest.metadata.namespace, name: manifest.metadata.name })}`;
      try {
        // force: the listener owns these objects; a field another manager took over is taken back.
        await api.patch(manifest, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
      } catch (error) {
        if (error instanceof ApiException && error.code === 422)
          throw new ApplyRefusedError(422, `${what}: ${messageOf(error)}`);
        throw toKubeError(error, what);
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
