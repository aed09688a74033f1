/**
 * A fake Kubernetes API server (plain node:http) with what the listener agent uses: discovery,
 * server-side apply with field managers (generation bumped on a spec change, immutable fields kept
 * immutable, schema and a few API-server checks answered 422), get, list and watch by label selector,
 * delete (workloads take their pods with them) and status. There are no controllers: a test drives
 * rollouts itself (`markAvailable`, `failPods`, `exceedProgressDeadline`), or asks for `autoRollout`,
 * which makes every applied workload available at once.
 *
 * It also behaves like a real API server where one surprised the agent (issue 25): after a `restart`
 * it answers 403 until its authorization cache has synced; server-side apply keeps each field manager's
 * fields (`fake-kube-ssa.ts`), so a field its only manager stops applying is removed (a Deployment's
 * `replicas` falls back to 1) and a manager without force conflicts (409) with another's value; an
 * autoscaler can take `replicas` over (`scaleAsAutoscaler`); a field the schema does not declare is
 * answered as the version served (`minor`) does: 500 before 1.27, 400 with fieldValidation=Strict,
 * dropped with a Warning header otherwise; GET /version; watch events can lag behind the applies
 * (`holdWatchEvents`); pods can run without ever becoming ready (`podsNotReady`); and it can answer as
 * a busy server does (`answerNextApplies` with `TRANSIENT_ANSWERS`). Every failure is a Status body as
 * kube-apiserver writes it (kind Status, status Failure, message, reason unless unknown, code, details).
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';
import {
  managedFieldsOf,
  serverSideApply,
  takeOver,
  undeclaredField,
  withoutField,
  type Owners,
} from './fake-kube-ssa.ts';
import { labelProblems, schemaProblem } from './k8s-schemas.ts';
import { eventually } from '../support/wait.ts';

type Json = Record<string, unknown>;

/** A Deployment's `pod-template-hash` for its current template (the controller's is another digest of it). */
function templateHash(workload: KubeObject): string {
  return createHash('sha256')
    .update(JSON.stringify(workload.spec?.template ?? {}))
    .digest('hex')
    .slice(0, 10);
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    generation?: number;
    resourceVersion?: string;
    uid?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    managedFields?: { manager: string; operation: string; fieldsV1?: Json }[];
  };
  spec?: Json;
  status?: Json;
  data?: Record<string, string>;
  [field: string]: unknown;
}

interface Resource {
  readonly apiVersion: string;
  readonly kind: string;
  readonly plural: string;
}

const RESOURCES: readonly Resource[] = [
  { apiVersion: 'v1', kind: 'Pod', plural: 'pods' },
  { apiVersion: 'v1', kind: 'Service', plural: 'services' },
  { apiVersion: 'v1', kind: 'Secret', plural: 'secrets' },
  { apiVersion: 'v1', kind: 'PersistentVolumeClaim', plural: 'persistentvolumeclaims' },
  { apiVersion: 'apps/v1', kind: 'Deployment', plural: 'deployments' },
  { apiVersion: 'apps/v1', kind: 'StatefulSet', plural: 'statefulsets' },
  { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', plural: 'horizontalpodautoscalers' },
];

/** The Gateway API's route: served only by a fake made with `gatewayApi` (its CRDs installed). */
const HTTP_ROUTE: Resource = { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', plural: 'httproutes' };

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly query: URLSearchParams;
  readonly contentType: string | undefined;
}

interface Watcher {
  readonly plural: string;
  readonly namespace: string;
  readonly selector: string | null;
  readonly res: ServerResponse;
}

export interface FakeKubeOptions {
  /** Namespaces that exist; applying elsewhere is 404, as on a real cluster. */
  namespaces?: string[];
  /** Every applied Deployment or StatefulSet becomes available at once. */
  autoRollout?: boolean;
  /**
   * The Kubernetes minor version served (default the newest): a server before 1.28 does not know native
   * sidecars (`restartPolicy` of an init container), and its server-side apply answers a field it does
   * not know with a 500 Status, as 1.26 does.
   */
  minor?: number;
  /**
   * The cluster has the Gateway API's CRDs: `gateway.networking.k8s.io/v1` is in the API's discovery with
   * HTTPRoute, which can be applied, listed and watched. Without it the group is not served (404), as on
   * a cluster without them.
   */
  gatewayApi?: boolean;
}

/**
 * What the controller of the routes' Gateway does with every HTTPRoute: accept it (its backends are then
 * resolved: each Service must exist), or refuse it, as a Gateway whose listeners' `allowedRoutes` do not
 * take the route's namespace does (Accepted False, reason NotAllowedByListeners, with this message).
 */
export type GatewayController = { readonly accepts: true } | { readonly refuses: string };

const GATEWAY_CONTROLLER_NAME = 'gateway.example.net/fake-controller';

/** A Status the way an API server writes one for an answer it gives (any of these may come). */
export interface FakeAnswer {
  readonly code: number;
  /** The body as sent: a Status, or text (say, a proxy's page in front of the API server). */
  readonly body: Json | string;
}

/** An answer with a failure Status body, as the API server (or an admission webhook through it) writes one. */
export function statusAnswer(code: number, reason: string, message: string): FakeAnswer {
  return { code, body: status(code, reason, message) };
}

/** Answers a busy API server gives, each of which a client should simply try again. */
export const TRANSIENT_ANSWERS: Readonly<Record<string, FakeAnswer>> = {
  /** API Priority and Fairness turns the request away for now. */
  tooManyRequests: {
    code: 429,
    body: {
      ...status(429, 'TooManyRequests', 'Too many requests, please try again later.'),
      details: { retryAfterSeconds: 1 },
    },
  },
  /** Two writers of the same object at once. */
  conflict: {
    code: 409,
    body: status(
      409,
      'Conflict',
      'Operation cannot be fulfilled on deployments.apps "x": the object has been modified; please apply your changes to the latest version and try again',
    ),
  },
  /** etcd did not answer in time. */
  timeout: {
    code: 504,
    body: {
      ...status(
        504,
        'Timeout',
        'Timeout: request did not complete within requested timeout - context deadline exceeded',
      ),
      details: {},
    },
  },
  /** A load balancer in front of the API server, between two of its instances. */
  unavailable: { code: 503, body: 'upstream connect error or disconnect/reset before headers. reset reason: overflow' },
  /** A 500 that is no Status at all. */
  internalText: { code: 500, body: 'Internal Server Error' },
};

const clone = <T>(value: T): T => structuredClone(value);
const keyOf = (plural: string, namespace: string, name: string) => `${plural}/${namespace}/${name}`;

/** `a=b,c!=d,e`: the subset of label selectors the agent (and kubectl) commonly send. */
export function matchesSelector(labels: Record<string, string> | undefined, selector: string | null): boolean {
  if (selector === null || selector === '') return true;
  return selector.split(',').every((term) => {
    const t = term.trim();
    const ne = t.indexOf('!=');
    if (ne >= 0) return labels?.[t.slice(0, ne)] !== t.slice(ne + 2);
    const eq = t.indexOf('=');
    if (eq >= 0) return labels?.[t.slice(0, eq)] === t.slice(t[eq + 1] === '=' ? eq + 2 : eq + 1);
    return labels?.[t] !== undefined;
  });
}

/** A failure Status; `reason` '' is StatusReasonUnknown, which an API server leaves out of the body. */
function status(code: number, reason: string, message: string): Json {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    ...(reason === '' ? {} : { reason }),
    code,
  };
}

export class FakeKube {
  readonly requests: RecordedRequest[] = [];
  private readonly objects = new Map<string, KubeObject>();
  private readonly log: { rv: number; plural: string; namespace: string; type: string; object: KubeObject }[] = [];
  private readonly watchers = new Set<Watcher>();
  private readonly refusals: { kind: string; name: string | null; message: string }[] = [];
  /** Deployment key to the hashes of every template it had (`templateHash`). */
  private readonly templatesOf = new Map<string, Set<string>>();
  private readonly changes = new EventEmitter();
  private readonly namespaces: Set<string>;
  private readonly minor: number;
  /** The kinds this API server serves (HTTPRoute too once the Gateway API's CRDs are installed). */
  private resources: readonly Resource[];
  /** The Gateway's controller: what it says of every HTTPRoute (`setGatewayController`); null: none runs. */
  private gatewayController: GatewayController | null = null;
  /** Answers the next applies get instead of being applied, in order (`answerNextApplies`). */
  private readonly nextApplyAnswers: FakeAnswer[] = [];
  private readonly failures: { kind: string; name: string; answer: FakeAnswer }[] = [];
  private readonly forbidden = new Set<string>();
  /** Each object's field managers and the fields they own (server-side apply's bookkeeping). */
  private readonly owners = new Map<string, Owners>();
  /** `spec.replicas` of each Deployment, every value it had in order (`replicasHistory`). */
  private readonly replicas = new Map<string, number[]>();
  /** Watch events not delivered yet (`holdWatchEvents`). */
  private heldEvents: { watcher: Watcher; line: string }[] | null = null;
  /** The `fieldValidation` of every apply that got as far as the schema, in order. */
  readonly fieldValidations: string[] = [];
  /** Like a kube-apiserver just started: its authorization cache has not synced yet (`restart`). */
  private authorizationSynced = true;
  /** Requests answered 403, in order (namespace and verb). */
  readonly forbiddenAnswers: { namespace: string; verb: string }[] = [];
  private rv = 100;
  private compactedAt = 0;
  private uid = 0;
  autoRollout: boolean;
  /** The controllers do not see new generations until a test says (`startRollout`). */
  holdGenerations = false;

  private constructor(
    private readonly server: http.Server,
    options: FakeKubeOptions,
  ) {
    this.namespaces = new Set(options.namespaces ?? ['default']);
    this.minor = options.minor ?? 33;
    this.resources = options.gatewayApi ? [...RESOURCES, HTTP_ROUTE] : RESOURCES;
    this.autoRollout = options.autoRollout ?? false;
    this.changes.setMaxListeners(0);
  }

  static async start(options: FakeKubeOptions = {}): Promise<FakeKube> {
    const server = http.createServer((req, res) => {
      fake
        .handle(req, res)
        .catch((error: unknown) => {
          if (!res.headersSent) FakeKube.send(res, 500, status(500, 'InternalError', String(error)));
          else res.end();
        })
        // A request refused changes nothing, but waits on what the agent asked see it.
        .finally(() => fake.changes.emit('change'));
    });
    const fake = new FakeKube(server, options);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** A kubeconfig for this server, as a user's would be for a real cluster. */
  kubeConfig(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'fake', server: this.url, skipTLSVerify: true }],
      users: [{ name: 'fake', token: 'fake-token' }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'fake', namespace: 'default' }],
      currentContext: 'fake',
    });
    return kc;
  }

  async close(): Promise<void> {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // ----- what tests read -----------------------------------------------------------------------

  get(kind: string, namespace: string, name: string): KubeObject | undefined {
    const resource = this.resources.find((r) => r.kind === kind);
    const found = resource ? this.objects.get(keyOf(resource.plural, namespace, name)) : undefined;
    return found ? clone(found) : undefined;
  }

  list(filter: { kind?: string; namespace?: string; selector?: string } = {}): KubeObject[] {
    return [...this.objects.values()]
      .filter(
        (o) =>
          (filter.kind === undefined || o.kind === filter.kind) &&
          (filter.namespace === undefined || o.metadata.namespace === filter.namespace) &&
          matchesSelector(o.metadata.labels, filter.selector ?? null),
      )
      .map(clone);
  }

  /** Applies (PATCH with the apply content type) the agent made, in order. */
  applies(): RecordedRequest[] {
    return this.requests.filter((r) => r.method === 'PATCH');
  }

  /** Resolves with the first truthy value of `check`, evaluated now and after every change and request. */
  waitFor<T>(check: () => T | undefined | null | false, what = 'a change in the fake API server'): Promise<T> {
    return eventually(what, check, {
      wake: (recheck) => {
        this.changes.on('change', recheck);
        return () => this.changes.off('change', recheck);
      },
    });
  }

  // ----- what tests drive ----------------------------------------------------------------------

  /**
   * The Gateway API's CRDs are installed now: `gateway.networking.k8s.io/v1` is in the API's discovery
   * with HTTPRoute from here on (an operator ran `kubectl apply` of the standard channel).
   */
  installGatewayApi(): void {
    if (!this.resources.includes(HTTP_ROUTE)) this.resources = [...this.resources, HTTP_ROUTE];
    this.changes.emit('change');
  }

  /** The Gateway API's CRDs are removed: HTTPRoute is no longer served (404), and the routes are gone. */
  uninstallGatewayApi(): void {
    this.resources = this.resources.filter((r) => r !== HTTP_ROUTE);
    for (const [key, object] of this.objects) if (object.kind === 'HTTPRoute') this.objects.delete(key);
    this.changes.emit('change');
  }

  /**
   * A controller runs for the routes' Gateway and writes each HTTPRoute's `status.parents` as a real one
   * does: per parentRef, its controllerName and the conditions Accepted and ResolvedRefs with the route's
   * `observedGeneration`, written after every change of a route or a Service (null: no controller, no status).
   */
  setGatewayController(controller: GatewayController | null): void {
    this.gatewayController = controller;
    this.runGatewayController();
  }

  addNamespace(namespace: string): void {
    this.namespaces.add(namespace);
  }

  /**
   * Every request in the namespace answers 403 Forbidden, as for a service account without a Role
   * there (until `allow`).
   */
  forbid(namespace: string): void {
    this.forbidden.add(namespace);
  }

  allow(namespace: string): void {
    this.forbidden.delete(namespace);
  }

  /**
   * The API server restarts: every watch ends (clients list again), and until `syncAuthorization` every
   * request of the service account answers 403 Forbidden, the same Status as for a missing Role: a
   * kube-apiserver serves before its RBAC authorizer's informers have synced, and denies until then.
   */
  restart(): void {
    this.authorizationSynced = false;
    this.endWatches();
  }

  /** The authorization cache has synced: the Roles count again. */
  syncAuthorization(): void {
    this.authorizationSynced = true;
  }

  /** The next applies of this kind (and name) are refused with 422 and this message, like an invalid object. */
  refuseApply(kind: string, name: string | null, message: string): void {
    this.refusals.push({ kind, name, message });
  }

  /** Every apply of this kind and name gets this answer instead of being applied (until `acceptApply`). */
  failApplies(kind: string, name: string, answer: FakeAnswer): void {
    this.failures.push({ kind, name, answer });
  }

  /** The next applies (of any object) get these answers, one each, instead of being applied. */
  answerNextApplies(...answers: FakeAnswer[]): void {
    this.nextApplyAnswers.push(...answers);
  }

  /** Applies of this kind and name are accepted again (after `refuseApply` or `failApplies`). */
  acceptApply(kind: string, name: string | null): void {
    this.refusals.splice(0, this.refusals.length, ...this.refusals.filter((r) => r.kind !== kind || r.name !== name));
    this.failures.splice(0, this.failures.length, ...this.failures.filter((r) => r.kind !== kind || r.name !== name));
  }

  /** Puts an object as another client would (kubectl, say), without our field manager. */
  put(object: KubeObject): void {
    this.store(clone(object));
  }

  /** The controller has seen the current generation and has replicas left to update: progressing. */
  startRollout(namespace: string, name: string, kind = 'Deployment'): void {
    // A new rollout is progressing again: a deadline exceeded before is no longer the condition.
    this.setStatus(kind, namespace, name, (o) => ({
      ...o.status,
      observedGeneration: o.metadata.generation,
      updatedReplicas: 0,
      ...(kind === 'Deployment'
        ? {
            conditions: [
              { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable' },
              { type: 'Progressing', status: 'True', reason: 'ReplicaSetUpdated' },
            ],
          }
        : {}),
    }));
  }

  /** Every replica of the current template runs and is ready, and old ones are gone. */
  markAvailable(namespace: string, name: string, kind = 'Deployment'): void {
    const workload = this.mustGet(kind, namespace, name);
    const replicas = typeof workload.spec?.replicas === 'number' ? workload.spec.replicas : 1;
    this.replacePods(workload, replicas, () => ({
      phase: 'Running',
      containerStatuses: this.containersOf(workload).map((c) => ({
        name: c,
        ready: true,
        restartCount: 0,
        image: 'x',
        imageID: 'x',
        state: { running: { startedAt: new Date().toISOString() } },
      })),
    }));
    const generation = workload.metadata.generation;
    this.setStatus(kind, namespace, name, () =>
      kind === 'StatefulSet'
        ? {
            observedGeneration: generation,
            replicas,
            readyReplicas: replicas,
            updatedReplicas: replicas,
            currentReplicas: replicas,
            availableReplicas: replicas,
            currentRevision: `${name}-${generation}`,
            updateRevision: `${name}-${generation}`,
          }
        : {
            observedGeneration: generation,
            replicas,
            updatedReplicas: replicas,
            readyReplicas: replicas,
            availableReplicas: replicas,
            conditions: [
              { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable' },
              { type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable' },
            ],
          },
    );
  }

  /** One new pod of the current template, its first container waiting for this reason (ImagePullBackOff, CrashLoopBackOff...). */
  failPods(
    namespace: string,
    name: string,
    reason: string,
    message: string,
    kind = 'Deployment',
    restarts = reason === 'CrashLoopBackOff' ? 3 : 0,
  ): void {
    const workload = this.mustGet(kind, namespace, name);
    const containers = this.containersOf(workload);
    this.replacePods(workload, 1, () => ({
      phase: 'Pending',
      containerStatuses: containers.map((c, i) => ({
        name: c,
        ready: false,
        restartCount: restarts,
        image: 'x',
        imageID: '',
        state: i === 0 ? { waiting: { reason, message } } : { running: {} },
      })),
    }));
    this.setStatus(kind, namespace, name, (o) => ({
      ...o.status,
      observedGeneration: o.metadata.generation,
      replicas: 1,
      updatedReplicas: 1,
      availableReplicas: 0,
      unavailableReplicas: 1,
    }));
  }

  /** The workload's pods were made this many seconds ago (their creationTimestamp), as if they had waited that long. */
  agePods(namespace: string, name: string, seconds: number, kind = 'Deployment'): void {
    const workload = this.mustGet(kind, namespace, name);
    const created = new Date(Date.now() - seconds * 1000).toISOString();
    for (const pod of this.list({ kind: 'Pod', namespace, selector: this.selectorOf(workload) }))
      this.store({ ...clone(pod), metadata: { ...clone(pod.metadata), creationTimestamp: created } });
  }

  /** The Deployment controller gave up waiting: Progressing=False, ProgressDeadlineExceeded. */
  exceedProgressDeadline(namespace: string, name: string): void {
    this.setStatus('Deployment', namespace, name, (o) => ({
      ...o.status,
      observedGeneration: o.metadata.generation,
      replicas: 1,
      updatedReplicas: 1,
      availableReplicas: 0,
      conditions: [
        {
          type: 'Progressing',
          status: 'False',
          reason: 'ProgressDeadlineExceeded',
          message: `ReplicaSet "${name}-${templateHash(o)}" has timed out progressing.`,
        },
      ],
    }));
  }

  /**
   * The Deployment controller once its template went back to one it still has a ReplicaSet of (the
   * rollback after a failed rollout): it has seen the generation and brought up the pods of that
   * template, the failed template's pods are still there, and its Progressing condition still says the
   * failed ReplicaSet timed out (a rollback to an existing ReplicaSet sets no new one; as
   * kube-controller-manager 1.26 does, issue 34). `markAvailable` ends it.
   */
  rollBackTo(namespace: string, name: string): void {
    const workload = this.mustGet('Deployment', namespace, name);
    const replicas = typeof workload.spec?.replicas === 'number' ? workload.spec.replicas : 1;
    const template = (workload.spec?.template ?? {}) as { spec?: Json };
    for (let i = 0; i < replicas; i += 1)
      this.store({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: `${name}-back${workload.metadata.generation ?? 1}-${i}`,
          namespace,
          labels: this.podLabels(workload),
        },
        spec: clone(template.spec ?? { containers: [] }),
        status: {
          phase: 'Running',
          containerStatuses: this.containersOf(workload).map((c) => ({
            name: c,
            ready: true,
            restartCount: 0,
            image: 'x',
            imageID: 'x',
            state: { running: { startedAt: new Date().toISOString() } },
          })),
        },
      });
    const failed = this.list({ kind: 'Pod', namespace, selector: this.selectorOf(workload) }).length - replicas;
    this.setStatus('Deployment', namespace, name, (o) => ({
      ...o.status,
      observedGeneration: o.metadata.generation,
      replicas: replicas + failed,
      updatedReplicas: replicas,
      readyReplicas: replicas,
      availableReplicas: replicas,
    }));
  }

  /**
   * The HorizontalPodAutoscaler controller scales the Deployment (an Update of its scale subresource):
   * `spec.replicas` becomes its own field, whoever applied it before.
   */
  scaleAsAutoscaler(namespace: string, name: string, replicas: number): void {
    const workload = this.mustGet('Deployment', namespace, name);
    const key = keyOf('deployments', namespace, name);
    const owners = takeOver(this.owners.get(key) ?? new Map(), 'kube-controller-manager', [['spec', 'replicas']]);
    this.owners.set(key, owners);
    const changed = workload.spec?.replicas !== replicas;
    this.store({
      ...clone(workload),
      metadata: {
        ...clone(workload.metadata),
        generation: (workload.metadata.generation ?? 1) + (changed ? 1 : 0),
        managedFields: managedFieldsOf(owners, 'apps/v1') as KubeObject['metadata']['managedFields'],
      },
      spec: { ...clone(workload.spec), replicas },
    });
  }

  /** Every value `spec.replicas` of the Deployment had, in order (a value repeated is listed once). */
  replicasHistory(namespace: string, name: string): number[] {
    return [...(this.replicas.get(keyOf('deployments', namespace, name)) ?? [])];
  }

  /** The managers of the object and what they own, as `metadata.managedFields` shows them. */
  managersOf(kind: string, namespace: string, name: string): string[] {
    const resource = this.resources.find((r) => r.kind === kind)!;
    return [...(this.owners.get(keyOf(resource.plural, namespace, name))?.keys() ?? [])];
  }

  /**
   * Watch events are held back (a slow watch: an apply is answered before the watch delivers it) until
   * `releaseWatchEvents`.
   */
  holdWatchEvents(): void {
    this.heldEvents ??= [];
  }

  releaseWatchEvents(): void {
    const held = this.heldEvents ?? [];
    this.heldEvents = null;
    for (const { watcher, line } of held) if (this.watchers.has(watcher)) watcher.res.write(line);
  }

  /**
   * The workload's pods run, but their containers never pass their readiness probe: the kubelet keeps
   * them running and not ready (the pod's Ready condition False, ContainersNotReady).
   */
  podsNotReady(namespace: string, name: string, kind = 'Deployment'): void {
    const workload = this.mustGet(kind, namespace, name);
    const containers = this.containersOf(workload);
    const started = new Date(Date.now() - 700_000).toISOString();
    this.replacePods(workload, 1, () => ({
      phase: 'Running',
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Initialized', status: 'True' },
        {
          type: 'ContainersReady',
          status: 'False',
          reason: 'ContainersNotReady',
          message: `containers with unready status: [${containers.join(' ')}]`,
        },
        {
          type: 'Ready',
          status: 'False',
          reason: 'ContainersNotReady',
          message: `containers with unready status: [${containers.join(' ')}]`,
        },
      ],
      containerStatuses: containers.map((c) => ({
        name: c,
        ready: false,
        started: true,
        restartCount: 0,
        image: 'x',
        imageID: 'x',
        state: { running: { startedAt: started } },
      })),
    }));
    this.setStatus(kind, namespace, name, (o) => ({
      ...o.status,
      observedGeneration: o.metadata.generation,
      replicas: 1,
      updatedReplicas: 1,
      readyReplicas: 0,
      availableReplicas: 0,
      unavailableReplicas: 1,
    }));
  }

  /** Ends every open watch, as an API server does when a watch times out; clients resume. */
  endWatches(): void {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  /**
   * Forgets the history (as etcd compaction does): open watches end with a 410 Gone event, and a watch
   * from an older resource version gets one at once; clients must list again.
   */
  compact(): void {
    this.compactedAt = this.rv;
    for (const w of this.watchers)
      w.res.end(`${JSON.stringify({ type: 'ERROR', object: status(410, 'Expired', 'too old resource version') })}\n`);
    this.watchers.clear();
  }

  // ----- the server ----------------------------------------------------------------------------

  private static send(res: ServerResponse, code: number, body: unknown): void {
    if (typeof body === 'string') {
      res.writeHead(code, { 'content-type': 'text/plain' });
      res.end(body);
      return;
    }
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  private mustGet(kind: string, namespace: string, name: string): KubeObject {
    const resource = this.resources.find((r) => r.kind === kind)!;
    const found = this.objects.get(keyOf(resource.plural, namespace, name));
    if (!found) throw new Error(`fake kube: no ${kind} ${namespace}/${name}`);
    return found;
  }

  private containersOf(workload: KubeObject): string[] {
    const template = (workload.spec?.template ?? {}) as { spec?: { containers?: { name: string }[] } };
    return (template.spec?.containers ?? []).map((c) => c.name);
  }

  /**
   * The template's labels, and for a Deployment's pods `pod-template-hash` as its controller adds it:
   * the ReplicaSet of a template is `<deployment>-<hash>`.
   */
  private podLabels(workload: KubeObject): Record<string, string> {
    const template = (workload.spec?.template ?? {}) as { metadata?: { labels?: Record<string, string> } };
    const labels = template.metadata?.labels ?? {};
    return workload.kind === 'Deployment' ? { ...labels, 'pod-template-hash': templateHash(workload) } : labels;
  }

  private selectorOf(workload: KubeObject): string {
    const selector = (workload.spec?.selector ?? {}) as { matchLabels?: Record<string, string> };
    return Object.entries(selector.matchLabels ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
  }

  private replacePods(workload: KubeObject, count: number, podStatus: () => Json): void {
    const { namespace, name } = workload.metadata;
    for (const pod of this.list({ kind: 'Pod', namespace, selector: this.selectorOf(workload) }))
      this.remove('pods', namespace, pod.metadata.name);
    for (let i = 0; i < count; i += 1) {
      const podName =
        workload.kind === 'StatefulSet' ? `${name}-${i}` : `${name}-g${workload.metadata.generation ?? 1}-${i}`;
      const template = (workload.spec?.template ?? {}) as { spec?: Json };
      this.store({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: podName, namespace, labels: this.podLabels(workload) },
        spec: clone(template.spec ?? { containers: [] }),
        status: podStatus(),
      });
    }
  }

  private setStatus(kind: string, namespace: string, name: string, make: (o: KubeObject) => Json): void {
    const object = this.mustGet(kind, namespace, name);
    this.store({ ...clone(object), status: make(object) });
  }

  /** Stores (a copy of) the object with a new resource version and tells the watchers; no-ops change nothing. */
  private store(object: KubeObject): KubeObject {
    const resource = this.resources.find((r) => r.kind === object.kind)!;
    const key = keyOf(resource.plural, object.metadata.namespace, object.metadata.name);
    const before = this.objects.get(key);
    // Destructured only to compare the metadata without resourceVersion.
    const { resourceVersion: _rv, ...beforeMeta } = before?.metadata ?? {};
    const { resourceVersion: _rv2, ...afterMeta } = object.metadata;
    if (before && isDeepStrictEqual({ ...before, metadata: beforeMeta }, { ...object, metadata: afterMeta }))
      return before;
    this.rv += 1;
    const stored: KubeObject = {
      ...object,
      metadata: {
        ...object.metadata,
        uid: object.metadata.uid ?? `uid-${++this.uid}`,
        creationTimestamp: object.metadata.creationTimestamp ?? new Date().toISOString(),
        resourceVersion: String(this.rv),
      },
    };
    this.objects.set(key, stored);
    const replicas = stored.kind === 'Deployment' ? stored.spec?.replicas : undefined;
    if (typeof replicas === 'number') {
      const history = this.replicas.get(key) ?? [];
      if (history[history.length - 1] !== replicas) history.push(replicas);
      this.replicas.set(key, history);
    }
    this.emit(before ? 'MODIFIED' : 'ADDED', resource.plural, stored);
    if (stored.kind === 'HTTPRoute' || stored.kind === 'Service') this.runGatewayController();
    return stored;
  }

  /** The Gateway controller's pass over every route (a status write that changes nothing is no change). */
  private runGatewayController(): void {
    const controller = this.gatewayController;
    if (controller === null) return;
    for (const route of [...this.objects.values()].filter((o) => o.kind === 'HTTPRoute')) {
      const spec = (route.spec ?? {}) as {
        parentRefs?: Json[];
        rules?: { backendRefs?: { name: string; namespace?: string }[] }[];
      };
      const namespace = route.metadata.namespace;
      const missing = (spec.rules ?? [])
        .flatMap((r) => r.backendRefs ?? [])
        .find((b) => !this.objects.has(keyOf('services', b.namespace ?? namespace, b.name)));
      const generation = route.metadata.generation ?? 1;
      const before = ((route.status as { parents?: { conditions?: Json[] }[] } | undefined)?.parents ?? []).flatMap(
        (p) => p.conditions ?? [],
      );
      const condition = (type: string, ok: boolean, reason: string, message: string): Json => {
        const status = ok ? 'True' : 'False';
        const same = before.find((c) => c.type === type && c.status === status);
        return {
          type,
          status,
          reason,
          message,
          observedGeneration: generation,
          lastTransitionTime: same?.lastTransitionTime ?? new Date().toISOString(),
        };
      };
      const accepted =
        'refuses' in controller
          ? condition('Accepted', false, 'NotAllowedByListeners', controller.refuses)
          : condition('Accepted', true, 'Accepted', 'Route is accepted');
      const resolved =
        missing === undefined
          ? condition('ResolvedRefs', true, 'ResolvedRefs', 'Resolved all the Object references for the Route')
          : condition(
              'ResolvedRefs',
              false,
              'BackendNotFound',
              `Service "${missing.name}" not found in namespace "${missing.namespace ?? namespace}"`,
            );
      const parents = (spec.parentRefs ?? []).map((parentRef) => ({
        parentRef,
        controllerName: GATEWAY_CONTROLLER_NAME,
        conditions: [accepted, resolved],
      }));
      this.store({ ...clone(route), status: { parents } });
    }
  }

  private remove(plural: string, namespace: string, name: string): boolean {
    const key = keyOf(plural, namespace, name);
    const object = this.objects.get(key);
    if (!object) return false;
    this.objects.delete(key);
    this.owners.delete(key);
    this.rv += 1;
    this.emit('DELETED', plural, { ...object, metadata: { ...object.metadata, resourceVersion: String(this.rv) } });
    if (plural === 'services') this.runGatewayController();
    return true;
  }

  private emit(type: string, plural: string, object: KubeObject): void {
    const entry = { rv: this.rv, plural, namespace: object.metadata.namespace, type, object: clone(object) };
    this.log.push(entry);
    for (const w of this.watchers) {
      if (
        w.plural === plural &&
        w.namespace === entry.namespace &&
        matchesSelector(object.metadata.labels, w.selector)
      ) {
        const line = `${JSON.stringify({ type, object: entry.object })}\n`;
        if (this.heldEvents === null) w.res.write(line);
        else this.heldEvents.push({ watcher: w, line });
      }
    }
    this.changes.emit('change');
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake');
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    this.requests.push({
      method: req.method ?? 'GET',
      path: url.pathname,
      query: url.searchParams,
      contentType: req.headers['content-type'],
    });

    if (req.method === 'GET' && url.pathname === '/version') {
      FakeKube.send(res, 200, {
        major: '1',
        minor: String(this.minor),
        gitVersion: `v1.${this.minor}.4`,
        platform: 'linux/amd64',
      });
      return;
    }
    const discovery = this.resources.filter(
      (r) => (url.pathname === '/api/v1' && r.apiVersion === 'v1') || url.pathname === `/apis/${r.apiVersion}`,
    );
    if (req.method === 'GET' && discovery.length > 0) {
      const groupVersion = discovery[0]!.apiVersion;
      FakeKube.send(res, 200, {
        kind: 'APIResourceList',
        apiVersion: 'v1',
        groupVersion,
        resources: discovery.map((r) => ({
          name: r.plural,
          singularName: r.kind.toLowerCase(),
          namespaced: true,
          kind: r.kind,
          verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
        })),
      });
      return;
    }

    const match = /^\/(?:api\/v1|apis\/([^/]+\/[^/]+))\/namespaces\/([^/]+)\/([^/]+)(?:\/([^/]+))?$/.exec(url.pathname);
    const resource = match
      ? this.resources.find((r) => r.plural === match[3] && r.apiVersion === (match[1] ?? 'v1'))
      : undefined;
    if (!match || !resource) {
      FakeKube.send(
        res,
        404,
        status(404, 'NotFound', `the server could not find the requested resource (${req.method} ${url.pathname})`),
      );
      return;
    }
    const namespace = decodeURIComponent(match[2]!);
    const name = match[4] === undefined ? null : decodeURIComponent(match[4]);
    if (this.forbidden.has(namespace) || !this.authorizationSynced) {
      const verb =
        req.method === 'GET'
          ? url.searchParams.get('watch') === 'true'
            ? 'watch'
            : name === null
              ? 'list'
              : 'get'
          : req.method === 'DELETE'
            ? 'delete'
            : 'patch';
      const group = resource.apiVersion.includes('/') ? resource.apiVersion.split('/')[0]! : '';
      this.forbiddenAnswers.push({ namespace, verb });
      FakeKube.send(res, 403, {
        ...status(
          403,
          'Forbidden',
          `${resource.plural}${group ? `.${group}` : ''} is forbidden: User "system:serviceaccount:slipway-listener:slipway-listener" cannot ${verb} resource "${resource.plural}" in API group "${group}" in the namespace "${namespace}"`,
        ),
        details: { ...(group ? { group } : {}), kind: resource.plural },
      });
      return;
    }

    if (req.method === 'GET' && name === null) {
      const selector = url.searchParams.get('labelSelector');
      if (url.searchParams.get('watch') === 'true') {
        this.watch(res, resource, namespace, selector, Number(url.searchParams.get('resourceVersion') ?? '0'));
        return;
      }
      const items = [...this.objects.values()].filter(
        (o) =>
          o.kind === resource.kind &&
          o.metadata.namespace === namespace &&
          matchesSelector(o.metadata.labels, selector),
      );
      FakeKube.send(res, 200, {
        kind: `${resource.kind}List`,
        apiVersion: resource.apiVersion,
        metadata: { resourceVersion: String(this.rv) },
        items,
      });
      return;
    }
    if (name === null) {
      FakeKube.send(res, 405, status(405, 'MethodNotAllowed', `${req.method} on a collection is not supported here`));
      return;
    }
    const existing = this.objects.get(keyOf(resource.plural, namespace, name));
    if (req.method === 'GET') {
      if (existing) FakeKube.send(res, 200, existing);
      else FakeKube.send(res, 404, status(404, 'NotFound', `${resource.plural} "${name}" not found`));
      return;
    }
    if (req.method === 'DELETE') {
      if (!existing) {
        FakeKube.send(res, 404, status(404, 'NotFound', `${resource.plural} "${name}" not found`));
        return;
      }
      // Foreground or background, the end is the same here: the workload's pods go with it.
      if (resource.kind === 'Deployment' || resource.kind === 'StatefulSet') {
        for (const pod of this.list({ kind: 'Pod', namespace, selector: this.selectorOf(existing) }))
          this.remove('pods', namespace, pod.metadata.name);
      }
      this.remove(resource.plural, namespace, name);
      FakeKube.send(res, 200, {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Success',
        details: { name, kind: resource.plural },
      });
      return;
    }
    if (req.method === 'PATCH') {
      this.apply(res, req, url, resource, namespace, name, body, existing);
      return;
    }
    FakeKube.send(res, 405, status(405, 'MethodNotAllowed', `${req.method} is not supported here`));
  }

  private watch(
    res: ServerResponse,
    resource: Resource,
    namespace: string,
    selector: string | null,
    from: number,
  ): void {
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // As an API server does: the client knows the watch is on before the first event.
    res.flushHeaders();
    if (from < this.compactedAt) {
      res.end(
        `${JSON.stringify({ type: 'ERROR', object: status(410, 'Expired', `too old resource version: ${from} (${this.compactedAt})`) })}\n`,
      );
      return;
    }
    const watcher: Watcher = { plural: resource.plural, namespace, selector, res };
    for (const entry of this.log) {
      if (
        entry.rv > from &&
        entry.plural === resource.plural &&
        entry.namespace === namespace &&
        matchesSelector(entry.object.metadata.labels, selector)
      ) {
        res.write(`${JSON.stringify({ type: entry.type, object: entry.object })}\n`);
      }
    }
    this.watchers.add(watcher);
    res.on('close', () => this.watchers.delete(watcher));
  }

  private apply(
    res: ServerResponse,
    req: IncomingMessage,
    url: URL,
    resource: Resource,
    namespace: string,
    name: string,
    body: string,
    existing: KubeObject | undefined,
  ): void {
    if (req.headers['content-type'] !== 'application/apply-patch+yaml') {
      FakeKube.send(
        res,
        415,
        status(
          415,
          'UnsupportedMediaType',
          `this fake only takes server-side apply, got ${req.headers['content-type']}`,
        ),
      );
      return;
    }
    const manager = url.searchParams.get('fieldManager');
    if (!manager) {
      FakeKube.send(
        res,
        400,
        status(400, 'BadRequest', 'PATCH, application/apply-patch+yaml: fieldManager is required'),
      );
      return;
    }
    let applied: KubeObject;
    try {
      applied = JSON.parse(body) as KubeObject;
    } catch {
      FakeKube.send(res, 400, status(400, 'BadRequest', 'this fake reads apply bodies written as JSON'));
      return;
    }
    const answer =
      this.nextApplyAnswers.shift() ?? this.failures.find((f) => f.kind === resource.kind && f.name === name)?.answer;
    if (answer !== undefined) {
      FakeKube.send(res, answer.code, answer.body);
      return;
    }
    if (!this.namespaces.has(namespace)) {
      FakeKube.send(res, 404, {
        ...status(404, 'NotFound', `namespaces "${namespace}" not found`),
        details: { name: namespace, kind: 'namespaces' },
      });
      return;
    }
    // The schema's unknown fields: a 1.26 server fails server-side apply's typed patch with a 500 whatever
    // was asked (kubernetes/kubernetes#122480); a newer one refuses them under fieldValidation=Strict
    // (400), and otherwise drops them with a warning (Warn, the default) or silently (Ignore).
    const validation = url.searchParams.get('fieldValidation') ?? 'Warn';
    const warnings: string[] = [];
    for (
      let undeclared = this.undeclaredField(applied);
      undeclared !== null;
      undeclared = this.undeclaredField(applied)
    ) {
      const message = `failed to create typed patch object (${namespace}/${name}; ${resource.apiVersion}, Kind=${resource.kind}): ${undeclared}: field not declared in schema`;
      if (this.minor < 27) {
        FakeKube.send(res, 500, status(500, '', message));
        return;
      }
      if (validation === 'Strict') {
        FakeKube.send(res, 400, status(400, 'BadRequest', message));
        return;
      }
      if (validation !== 'Ignore') warnings.push(`299 - "unknown field \\"${undeclared.slice(1)}\\""`);
      applied = withoutField(applied, undeclared) as unknown as KubeObject;
    }
    this.fieldValidations.push(validation);
    const invalid = (causes: string[]) =>
      FakeKube.send(res, 422, status(422, 'Invalid', `${resource.kind} "${name}" is invalid: ${causes.join(', ')}`));
    if (
      applied.kind !== resource.kind ||
      applied.apiVersion !== resource.apiVersion ||
      applied.metadata?.name !== name ||
      (applied.metadata.namespace ?? namespace) !== namespace
    ) {
      invalid(['kind, apiVersion, name and namespace must match the request path']);
      return;
    }
    const refusal = this.refusals.find((r) => r.kind === resource.kind && (r.name === null || r.name === name));
    if (refusal) {
      invalid([refusal.message]);
      return;
    }
    const key = keyOf(resource.plural, namespace, name);
    const result = serverSideApply(
      existing,
      applied,
      this.owners.get(key) ?? new Map(),
      manager,
      url.searchParams.get('force') === 'true',
    );
    if ('conflicts' in result) {
      const n = result.conflicts.length;
      FakeKube.send(
        res,
        409,
        status(
          409,
          'Conflict',
          `Apply failed with ${n} conflict${n === 1 ? '' : 's'}: ${result.conflicts.map((c) => `conflict with "${c.manager}": ${c.field}`).join(', ')}`,
        ),
      );
      return;
    }
    const merged = result.object as unknown as KubeObject;
    // The object as it would be is what the API server validates (an apply of some fields only is fine).
    const { managedFields: _m, resourceVersion: _rv, ...mergedMeta } = merged.metadata ?? {};
    const candidate = {
      ...merged,
      apiVersion: resource.apiVersion,
      kind: resource.kind,
      metadata: { ...mergedMeta, name, namespace },
    } as KubeObject;
    delete candidate.status;
    const problems = [
      ...(schemaProblem(candidate) === null ? [] : [schemaProblem(candidate)!]),
      ...labelProblems(candidate.metadata.labels, 'metadata.labels'),
      ...this.apiServerChecks(candidate),
    ];
    if (existing) problems.push(...this.immutableChanges(existing, candidate));
    if (problems.length > 0) {
      invalid(problems);
      return;
    }
    const spec = merged.spec === undefined ? undefined : { ...merged.spec };
    if (spec && (resource.kind === 'Deployment' || resource.kind === 'StatefulSet') && spec.replicas === undefined) {
      // Nobody sets replicas (any more): the API server's default, 1.
      spec.replicas = 1;
    }
    const specChanged = !isDeepStrictEqual(existing?.spec, spec);
    const generation = existing ? (existing.metadata.generation ?? 1) + (specChanged ? 1 : 0) : 1;
    this.owners.set(key, result.owners);
    const stored = this.store({
      ...merged,
      apiVersion: resource.apiVersion,
      kind: resource.kind,
      metadata: {
        ...merged.metadata,
        name,
        namespace,
        generation,
        uid: existing?.metadata.uid,
        creationTimestamp: existing?.metadata.creationTimestamp,
        managedFields: managedFieldsOf(result.owners, resource.apiVersion) as KubeObject['metadata']['managedFields'],
      },
      ...(spec === undefined ? {} : { spec }),
      ...(existing?.status === undefined ? {} : { status: existing.status }),
    });
    if (warnings.length > 0) res.setHeader('Warning', warnings);

    if (resource.kind === 'StatefulSet' && !existing) this.claimVolumes(stored);
    FakeKube.send(res, existing ? 200 : 201, stored);
    // The templates a Deployment had: its controller keeps a ReplicaSet of each (its revision history).
    const templates = this.templatesOf.get(key) ?? new Set<string>();
    const rollback = resource.kind === 'Deployment' && specChanged && templates.has(templateHash(stored));
    if (resource.kind === 'Deployment') this.templatesOf.set(key, templates.add(templateHash(stored)));
    if ((resource.kind === 'Deployment' || resource.kind === 'StatefulSet') && specChanged) {
      if (this.autoRollout) this.markAvailable(namespace, name, resource.kind);
      // Back to a template it has a ReplicaSet of: the controller sets no new Progressing condition, so
      // one that says the template after it timed out stays (kube-controller-manager 1.26, issue 34).
      else if (rollback && !this.holdGenerations)
        this.setStatus('Deployment', namespace, name, (o) => ({
          ...o.status,
          observedGeneration: o.metadata.generation,
        }));
      // As the workload controllers do within moments: they see the new generation, nothing is updated yet.
      else if (!this.holdGenerations) this.startRollout(namespace, name, resource.kind);
    }
  }

  /** What the StatefulSet controller does first: a claim per volume claim template, labelled as the template says. */
  private claimVolumes(set: KubeObject): void {
    const templates = (set.spec?.volumeClaimTemplates ?? []) as {
      metadata: { name: string; labels?: Record<string, string> };
      spec: Json;
    }[];
    for (const t of templates) {
      const name = `${t.metadata.name}-${set.metadata.name}-0`;
      if (this.get('PersistentVolumeClaim', set.metadata.namespace, name)) continue;
      this.store({
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: { name, namespace: set.metadata.namespace, labels: t.metadata.labels ?? {} },
        spec: clone(t.spec),
        status: { phase: 'Bound' },
      });
    }
  }

  /** The first field of `object` the served version does not know, as a path; null when none. */
  private undeclaredField(object: KubeObject): string | null {
    if (this.minor < 28) {
      // Native sidecars came with 1.28: an init container's restartPolicy is unknown before.
      const template = (object.spec?.template ?? {}) as { spec?: { initContainers?: Json[] } };
      const index = (template.spec?.initContainers ?? []).findIndex((c) => c.restartPolicy !== undefined);
      if (index >= 0) return `.spec.template.spec.initContainers[${index}].restartPolicy`;
    }
    return undeclaredField(object);
  }

  /** A few of the API server's own validations that no OpenAPI schema says. */
  private apiServerChecks(object: KubeObject): string[] {
    const problems: string[] = [];
    const spec = object.spec as
      | {
          selector?: { matchLabels?: Record<string, string> };
          template?: { metadata?: { labels?: Record<string, string> }; spec?: Json };
          volumeClaimTemplates?: { metadata: { name: string } }[];
        }
      | undefined;
    if (object.kind === 'Deployment' || object.kind === 'StatefulSet') {
      const templateLabels = spec?.template?.metadata?.labels ?? {};
      problems.push(...labelProblems(templateLabels, 'spec.template.metadata.labels'));
      for (const [k, v] of Object.entries(spec?.selector?.matchLabels ?? {})) {
        if (templateLabels[k] !== v)
          problems.push(`spec.template.metadata.labels: Invalid value: selector does not match template labels`);
      }
      const pod = (spec?.template?.spec ?? {}) as {
        volumes?: { name: string }[];
        containers?: { name: string; volumeMounts?: { name: string }[] }[];
        initContainers?: { name: string; volumeMounts?: { name: string }[] }[];
      };
      const volumes = new Set([
        ...(pod.volumes ?? []).map((v) => v.name),
        ...(spec?.volumeClaimTemplates ?? []).map((t) => t.metadata.name),
      ]);
      const names = new Set<string>();
      const all = [
        ...(pod.initContainers ?? []).map((c) => ({ c, field: 'initContainers' })),
        ...(pod.containers ?? []).map((c) => ({ c, field: 'containers' })),
      ];
      all.forEach(({ c, field }, i) => {
        if (names.has(c.name)) problems.push(`spec.template.spec.${field}[${i}].name: Duplicate value: "${c.name}"`);
        names.add(c.name);
        (c.volumeMounts ?? []).forEach((m, j) => {
          if (!volumes.has(m.name))
            problems.push(`spec.template.spec.${field}[${i}].volumeMounts[${j}].name: Not found: "${m.name}"`);
        });
      });
    }
    return problems;
  }

  private immutableChanges(before: KubeObject, after: KubeObject): string[] {
    const a = before.spec ?? {};
    const b = after.spec ?? {};
    if ((before.kind === 'Deployment' || before.kind === 'StatefulSet') && !isDeepStrictEqual(a.selector, b.selector))
      return ['spec.selector: Invalid value: field is immutable'];
    if (before.kind === 'StatefulSet') {
      for (const field of ['serviceName', 'volumeClaimTemplates', 'podManagementPolicy']) {
        if (!isDeepStrictEqual(a[field], b[field])) {
          return [
            "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
          ];
        }
      }
    }
    return [];
  }
}
