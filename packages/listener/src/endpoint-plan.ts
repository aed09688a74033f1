/**
 * The listener's decision about a deployment's endpoints (docs/listener.md, "Endpoints"), as a pure
 * function beside reconcile.ts's about the deployment itself: apply what of each endpoint's manifests
 * (endpoint-manifests.ts) the cluster does not show, report the endpoint SERVED once its Deployments have
 * rolled out (every replica of its revision available) and the service does not have it as served yet,
 * FAILED when its rollout fails, its manifests are refused or its split cannot be served here; and delete
 * what belongs to an endpoint the desired state no longer has. A service of before, which sends no
 * `endpoints`, leaves every endpoint object as it is (it cannot be told apart from "none").
 */
import type { DesiredDeployment, DesiredEndpoint, EndpointReportedStatus } from './desired-state.ts';
import { buildEndpointManifests, type GatewaySupport } from './endpoint-manifests.ts';
import { isDeployment, isPod, keyOf, refOf, type Manifest, type ObservedObject } from './kube-objects.ts';
import type { BuildContext } from './manifest-builder.ts';
import {
  DEPLOYMENT_ID_LABEL,
  ENDPOINT_LABEL,
  ENDPOINT_ROLE_LABEL,
  REVISION_ID_LABEL,
  SPEC_HASH_ANNOTATION,
} from './manifest-names.ts';
import type { ReadSpec } from './resource-spec.ts';
import { combine, deploymentRollout, podFailure, type Rollout } from './rollout-status.ts';
import { routeVerdict } from './route-status.ts';

/** No Gateway API, no Gateway: what a context without one means. */
export const NO_GATEWAY: GatewaySupport = { httpRoutes: false, parent: null, domain: null };

export type EndpointAction =
  | {
      readonly type: 'report-endpoint';
      readonly endpoint: string;
      readonly revisionId: string;
      readonly status: EndpointReportedStatus;
      readonly message?: string;
      /** A report about the endpoint's split (`revisionId` is the split's): the weight it is about. */
      readonly split?: { readonly weight: number };
      /** What this report is, for the memory of reports made (`endpointReportKey`). */
      readonly key: string;
      /** Reports of the memory it makes out of date (keys with this prefix): a split's word replaces the one before. */
      readonly replaces?: string;
    }
  | { readonly type: 'apply'; readonly revisionId: string; readonly manifest: Manifest; readonly inputs: string }
  | { readonly type: 'delete'; readonly target: ReturnType<typeof refOf> };

export interface EndpointMemory {
  /** `endpointReportKey`s of the endpoint reports this process made. */
  readonly endpointReports?: ReadonlySet<string>;
  /** Refusals by the key `endpointApplyKey`, as reconcile.ts keeps a revision's. */
  readonly refused: ReadonlyMap<string, { readonly message: string }>;
  readonly applied?: ReadonlyMap<string, string>;
}

/** The key of an endpoint's applies in the memory of refusals (never a revision id: those are the deployment's). */
export const endpointApplyKey = (deploymentId: string, endpoint: string, revisionId: string): string =>
  `endpoint:${deploymentId}/${endpoint}/${revisionId}`;

const reportKey = (deploymentId: string, endpoint: string, revisionId: string, what: string): string =>
  `${deploymentId}/${endpoint}/${revisionId}/${what}`;

const terminating = (o: ObservedObject): boolean =>
  o.metadata.deletionTimestamp !== undefined && o.metadata.deletionTimestamp !== null;

export interface EndpointPlanInput {
  readonly deployment: DesiredDeployment;
  readonly namespace: string;
  /** The deployment's current resource spec, read. */
  readonly spec: ReadSpec;
  /** Every object the listener has in the cluster. */
  readonly objects: readonly ObservedObject[];
  readonly memory: EndpointMemory;
  readonly gateway: GatewaySupport;
  readonly build: BuildContext;
}

export interface EndpointPlan {
  readonly actions: readonly EndpointAction[];
  /** Where each endpoint stands, for the log. */
  readonly summary: readonly string[];
  /** What a user must know and cannot see otherwise (a split this cluster cannot serve), for the heartbeat. */
  readonly notices: readonly string[];
}

/** The rollout of an endpoint's Deployments, once the cluster shows what was applied. */
function endpointRollout(
  manifests: readonly Manifest[],
  byKey: ReadonlyMap<string, ObservedObject>,
  pods: ObservedObject[],
): Rollout {
  return combine(
    manifests
      .filter((m) => m.kind === 'Deployment')
      .map((m): Rollout => {
        const observed = byKey.get(keyOf(refOf(m)));
        if (observed === undefined || !isDeployment(observed))
          return { state: 'pending', detail: `${keyOf(refOf(m))} not seen yet` };
        const role = m.metadata.labels[ENDPOINT_ROLE_LABEL];
        const revision = (m.metadata.annotations ?? {})['slipway.dev/revision-id'];
        const own = deploymentRollout(observed);
        if (own.state === 'complete') return own;
        const mine = pods
          .filter(isPod)
          .filter(
            (p) =>
              p.metadata.labels?.[ENDPOINT_ROLE_LABEL] === role && p.metadata.labels?.[REVISION_ID_LABEL] === revision,
          );
        return podFailure(mine) ?? own;
      }),
  );
}

function planEndpoint(input: EndpointPlanInput, endpoint: DesiredEndpoint, byKey: ReadonlyMap<string, ObservedObject>) {
  const { deployment, memory } = input;
  const id = deployment.deployment_id;
  const revisionId = endpoint.revision.id;
  const actions: EndpointAction[] = [];
  const notices: string[] = [];
  const report = (status: EndpointReportedStatus, what: string, message?: string) => {
    const key = reportKey(id, endpoint.name, revisionId, what);
    if (memory.endpointReports?.has(key)) return;
    actions.push({
      type: 'report-endpoint',
      endpoint: endpoint.name,
      revisionId,
      status,
      key,
      ...(message === undefined ? {} : { message: message.slice(0, 4000) }),
    });
  };
  const { manifests, splitNotServed, route } = buildEndpointManifests(
    { deployment, endpoint, namespace: input.namespace, spec: input.spec.spec },
    input.gateway,
    input.build,
  );
  const split = splitReporter(input, endpoint, route, byKey, actions, notices);
  if (splitNotServed !== null) split.notServed(splitNotServed);
  const fail = (message: string) => {
    report('FAILED', 'failed', message);
    return { actions, manifests, notices, summary: `endpoint ${endpoint.name}: ${message}` };
  };
  if (manifests.length === 0) return fail(`revision ${revisionId} has no image_uri`);
  if (input.spec.problems.length > 0) return fail(input.spec.problems.join('; '));
  const applyKey = endpointApplyKey(id, endpoint.name, revisionId);
  const refused = memory.refused.get(applyKey);
  if (refused !== undefined) return fail(refused.message);
  for (const m of manifests) {
    const owner = byKey.get(keyOf(refOf(m)))?.metadata.labels?.[DEPLOYMENT_ID_LABEL];
    if (owner !== undefined && owner !== id)
      return fail(
        `${keyOf(refOf(m))} already belongs to Slipway deployment ${owner}; rename the endpoint or one of the deployments`,
      );
  }
  const hash = (m: Manifest) => m.metadata.annotations?.[SPEC_HASH_ANNOTATION];
  const notInCluster = manifests.filter(
    (m) => byKey.get(keyOf(refOf(m)))?.metadata.annotations?.[SPEC_HASH_ANNOTATION] !== hash(m),
  );
  const pending = notInCluster.filter((m) => memory.applied?.get(keyOf(refOf(m))) !== hash(m));
  for (const manifest of pending) actions.push({ type: 'apply', revisionId: applyKey, manifest, inputs: '' });
  if (notInCluster.length > 0)
    return { actions, manifests, notices, summary: `endpoint ${endpoint.name}: applying revision ${revisionId}` };
  const pods = input.objects.filter(
    (o) =>
      o.kind === 'Pod' &&
      o.metadata.labels?.[DEPLOYMENT_ID_LABEL] === id &&
      o.metadata.labels?.[ENDPOINT_LABEL] === endpoint.name,
  );
  const rollout = endpointRollout(manifests, byKey, pods);
  if (rollout.state === 'failed') return fail(`${rollout.reason}: ${rollout.message}`);
  if (rollout.state !== 'complete')
    return {
      actions,
      manifests,
      notices,
      summary: `endpoint ${endpoint.name}: rolling out revision ${revisionId}: ${rollout.detail}`,
    };
  if (endpoint.served_revision_id !== revisionId) report('SERVED', 'served');
  // Every Deployment of the endpoint rolled out, the split's too: served once the Gateway accepts the route.
  split.rolledOut();
  return { actions, manifests, notices, summary: `endpoint ${endpoint.name}: serves revision ${revisionId}` };
}

/**
 * What the agent says of an endpoint's split (docs/listener.md, "Endpoints"): not served, with a plain
 * reason, where it cannot be (`notServed`) or where the Gateway's controller refused the route (said at
 * once, whatever the rollout); served once every Deployment of the endpoint rolled out and the Gateway
 * accepted the route as it is now (`rolledOut`). Each word once, until another replaces it.
 */
function splitReporter(
  input: EndpointPlanInput,
  endpoint: DesiredEndpoint,
  route: Manifest | null,
  byKey: ReadonlyMap<string, ObservedObject>,
  actions: EndpointAction[],
  notices: string[],
) {
  const { deployment, memory } = input;
  const split = endpoint.split;
  const prefix = `${reportKey(deployment.deployment_id, endpoint.name, endpoint.revision.id, 'split')}/`;
  const say = (state: 'SERVED' | 'FAILED', message?: string) => {
    if (split === null) return;
    const key = `${prefix}${split.revision_id}/${split.weight}/${state}/${message ?? ''}`;
    if (memory.endpointReports?.has(key)) return;
    actions.push({
      type: 'report-endpoint',
      endpoint: endpoint.name,
      revisionId: split.revision_id,
      status: state,
      split: { weight: split.weight },
      key,
      replaces: prefix,
      ...(message === undefined ? {} : { message: message.slice(0, 4000) }),
    });
  };
  const notServed = (reason: string) => {
    if (split === null) return;
    notices.push(
      `${deployment.name}: the split of endpoint ${endpoint.name} (${split.weight}% to revision ${split.revision_id}) is not served, the endpoint's revision takes all of its requests: ${reason}`,
    );
    say('FAILED', reason);
  };
  // The route as it is now, once the cluster shows it: what the Gateway says of an older one says nothing.
  const observed = route === null ? undefined : byKey.get(keyOf(refOf(route)));
  const current =
    route !== null &&
    observed?.metadata.annotations?.[SPEC_HASH_ANNOTATION] === route.metadata.annotations?.[SPEC_HASH_ANNOTATION];
  const parent = input.gateway.parent;
  const verdict = current && parent !== null && split !== null ? routeVerdict(observed, parent) : null;
  if (verdict?.state === 'refused') notServed(`the gateway refused the route: ${verdict.message}`);
  return {
    notServed,
    rolledOut: () => {
      if (verdict?.state === 'accepted') say('SERVED');
    },
  };
}

export function planEndpoints(input: EndpointPlanInput): EndpointPlan {
  const { deployment } = input;
  const endpoints = deployment.endpoints;
  if (endpoints === undefined) return { actions: [], summary: [], notices: [] };
  const id = deployment.deployment_id;
  const byKey = new Map(input.objects.map((o) => [keyOf(refOf(o)), o]));
  const planned = endpoints.map((endpoint) => planEndpoint(input, endpoint, byKey));
  const wanted = new Set(planned.flatMap((p) => p.manifests.map((m) => keyOf(refOf(m)))));
  // Everything of an endpoint that is gone, or of a part of one that is no more (a split that ended).
  const prune = input.objects
    .filter(
      (o) =>
        o.metadata.labels?.[DEPLOYMENT_ID_LABEL] === id &&
        o.metadata.labels?.[ENDPOINT_LABEL] !== undefined &&
        o.kind !== 'Pod' &&
        !terminating(o) &&
        !wanted.has(keyOf(refOf(o))),
    )
    .map((o): EndpointAction => ({ type: 'delete', target: refOf(o) }));
  return {
    actions: [...planned.flatMap((p) => p.actions), ...prune],
    summary: [
      ...planned.map((p) => p.summary),
      ...(prune.length > 0 ? [`deleting ${prune.length} object(s) of endpoints no longer there`] : []),
    ],
    notices: planned.flatMap((p) => p.notices),
  };
}
