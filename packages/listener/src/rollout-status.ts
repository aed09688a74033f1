/**
 * Where a rollout stands, from what the cluster shows: the workloads' generations and replica counts
 * (the same rules as `kubectl rollout status`) and the waiting reasons of their pods. Pure.
 */
import type { V1ContainerStatus, V1Deployment, V1Pod, V1Probe, V1StatefulSet } from '@kubernetes/client-node';

export type FailureReason =
  | 'image_pull_failed'
  | 'crash_loop'
  | 'progress_deadline_exceeded'
  | 'invalid_manifest'
  | 'namespace_not_watched'
  | 'namespace_not_found';

export type Rollout =
  /** Applied, but the workload's controller has not seen this generation yet. */
  | { readonly state: 'pending'; readonly detail: string }
  | { readonly state: 'progressing'; readonly detail: string }
  | { readonly state: 'complete' }
  | { readonly state: 'failed'; readonly reason: FailureReason; readonly message: string };

/**
 * Waiting reasons that do not go away by waiting. `ErrImagePull` is the first failed pull and
 * `ImagePullBackOff` the ones after; both mean the image cannot be had (wrong name, tag or
 * credentials). Other waits (`CreateContainerConfigError` for a Secret that is not there yet,
 * `ContainerCreating`) may resolve themselves, say when an operator syncs the Secret a moment later:
 * they fail the rollout only at its progress deadline, and the failure message names them.
 */
const FAILING_WAIT: Readonly<Record<string, FailureReason>> = {
  ErrImagePull: 'image_pull_failed',
  ImagePullBackOff: 'image_pull_failed',
  InvalidImageName: 'image_pull_failed',
  ErrImageNeverPull: 'image_pull_failed',
  CrashLoopBackOff: 'crash_loop',
};

interface Waiting {
  readonly reason: string;
  readonly text: string;
}

/** Every container of these pods that waits, with the kubelet's reason and message. */
function waitingContainers(pods: readonly V1Pod[]): Waiting[] {
  return pods.flatMap((pod) => {
    if (pod.metadata?.deletionTimestamp) return [];
    const statuses: V1ContainerStatus[] = [
      ...(pod.status?.initContainerStatuses ?? []),
      ...(pod.status?.containerStatuses ?? []),
    ];
    return statuses.flatMap((status) => {
      const waiting = status.state?.waiting;
      if (!waiting?.reason) return [];
      return [
        {
          reason: waiting.reason,
          text: `container ${status.name} of pod ${pod.metadata?.name ?? '?'} is ${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}`,
        },
      ];
    });
  });
}

/** The first container of these pods stuck for good, as a failure. */
export function podFailure(pods: readonly V1Pod[]): Rollout | null {
  for (const w of waitingContainers(pods)) {
    const reason = FAILING_WAIT[w.reason];
    if (reason !== undefined) return { state: 'failed', reason, message: w.text };
  }
  return null;
}

/** The most restarts of a container of these pods (the kubelet counts them over the pod's life). */
export function mostRestarts(pods: readonly V1Pod[]): number {
  return Math.max(
    0,
    ...pods.flatMap((pod) =>
      pod.metadata?.deletionTimestamp
        ? []
        : [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])].map(
            (c) => c.restartCount,
          ),
    ),
  );
}

/**
 * A container that is down after crashing (not ready, restarted, its last run terminated): between two
 * CrashLoopBackOff waits the kubelet shows it starting again, which must not read as healthy.
 */
export function restartingAfterCrash(pods: readonly V1Pod[]): string | null {
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    for (const status of pod.status?.containerStatuses ?? []) {
      const last = status.lastState?.terminated;
      if (!status.ready && status.restartCount > 0 && last)
        return `container ${status.name} of pod ${pod.metadata?.name ?? '?'} keeps restarting (${status.restartCount} restarts; last exit code ${last.exitCode}${last.reason ? `, ${last.reason}` : ''})`;
    }
  }
  return null;
}

/**
 * Every pod of the workload runs its current template (the controller has seen it, and no old pod is
 * left): a failure of these pods is one of what serves, not of a change on its way in.
 */
export function settledOnTemplate(workload: V1Deployment | V1StatefulSet, isStatefulSet: boolean): boolean {
  const generation = workload.metadata?.generation ?? 0;
  const status = workload.status;
  if ((status?.observedGeneration ?? 0) < generation) return false;
  if (isStatefulSet) {
    const set = status as V1StatefulSet['status'];
    return set?.updateRevision === undefined || set.updateRevision === set.currentRevision;
  }
  const wanted = workload.spec?.replicas ?? 1;
  const updated = status?.updatedReplicas ?? 0;
  return updated >= wanted && (status?.replicas ?? 0) <= updated;
}

/** A probe as a reader knows it: `TCP port http`, `HTTP GET /healthz on port 8080`, `command pg_isready ...`. */
function describeProbe(probe: V1Probe): string {
  if (probe.tcpSocket) return `TCP port ${String(probe.tcpSocket.port)}`;
  if (probe.httpGet) return `HTTP GET ${probe.httpGet.path ?? '/'} on port ${String(probe.httpGet.port)}`;
  if (probe.exec) return `command ${(probe.exec.command ?? []).join(' ')}`;
  if (probe.grpc) return `gRPC port ${probe.grpc.port}`;
  return 'a probe';
}

/**
 * Pods the scheduler has not placed (their PodScheduled condition False, with the scheduler's words),
 * and containers that run but are not ready: which probe they wait for. The kubelet reports a failing
 * probe only as an event, so what the pod shows is that the container runs and is not ready.
 */
function notReadyTexts(pods: readonly V1Pod[]): string[] {
  return pods.flatMap((pod) => {
    if (pod.metadata?.deletionTimestamp) return [];
    const name = pod.metadata?.name ?? '?';
    const unscheduled = (pod.status?.conditions ?? []).find((c) => c.type === 'PodScheduled' && c.status === 'False');
    if (unscheduled)
      return [
        `pod ${name} is not scheduled${unscheduled.reason ? ` (${unscheduled.reason})` : ''}${unscheduled.message ? `: ${unscheduled.message}` : ''}`,
      ];
    const specs = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
    return [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])].flatMap(
      (status) => {
        if (status.ready || !status.state?.running) return [];
        const spec = specs.find((c) => c.name === status.name);
        // An init container runs until it is done; only a sidecar (restartPolicy Always) is ever ready.
        const isInit = (pod.spec?.initContainers ?? []).some((c) => c.name === status.name);
        if (isInit && spec?.restartPolicy !== 'Always') return [];
        const why =
          status.started === false && spec?.startupProbe
            ? `its startup probe (${describeProbe(spec.startupProbe)}) has not passed`
            : spec?.readinessProbe
              ? `its readiness probe (${describeProbe(spec.readinessProbe)}) does not pass`
              : 'it has not become ready';
        return [`container ${status.name} of pod ${name} runs but is not ready: ${why}`];
      },
    );
  });
}

/** What the pods wait for, to say why a rollout made no progress. */
export function waitingDetail(pods: readonly V1Pod[]): string {
  const texts = [...waitingContainers(pods).map((w) => w.text), ...notReadyTexts(pods)];
  return texts.length === 0 ? '' : `; ${texts.slice(0, 3).join('; ')}`;
}

/**
 * `minReplicas`: an autoscaler's minimum for the Deployment; it is complete only with that many replicas
 * updated and available, even while its `replicas` are fewer (before the autoscaler has acted).
 */
export function deploymentRollout(deployment: V1Deployment, minReplicas = 0): Rollout {
  const name = deployment.metadata?.name ?? '?';
  const generation = deployment.metadata?.generation ?? 0;
  const status = deployment.status ?? {};
  if ((status.observedGeneration ?? 0) < generation)
    return {
      state: 'pending',
      detail: `Deployment ${name}: waiting for the controller to see generation ${generation}`,
    };
  const stalled = (status.conditions ?? []).find(
    (c) => c.type === 'Progressing' && c.status === 'False' && c.reason === 'ProgressDeadlineExceeded',
  );
  if (stalled) {
    return {
      state: 'failed',
      reason: 'progress_deadline_exceeded',
      message: `Deployment ${name} made no progress within its deadline${stalled.message ? `: ${stalled.message}` : ''}`,
    };
  }
  const wanted = Math.max(deployment.spec?.replicas ?? 1, minReplicas);
  const updated = status.updatedReplicas ?? 0;
  const total = status.replicas ?? 0;
  const available = status.availableReplicas ?? 0;
  if (updated < wanted)
    return { state: 'progressing', detail: `Deployment ${name}: ${updated} of ${wanted} new replicas updated` };
  if (total > updated)
    return { state: 'progressing', detail: `Deployment ${name}: ${total - updated} old replicas pending termination` };
  if (available < updated)
    return {
      state: 'progressing',
      detail: `Deployment ${name}: ${available} of ${updated} updated replicas available`,
    };
  return { state: 'complete' };
}

export function statefulSetRollout(set: V1StatefulSet): Rollout {
  const name = set.metadata?.name ?? '?';
  const generation = set.metadata?.generation ?? 0;
  const status = set.status ?? { replicas: 0 };
  if ((status.observedGeneration ?? 0) < generation)
    return {
      state: 'pending',
      detail: `StatefulSet ${name}: waiting for the controller to see generation ${generation}`,
    };
  const wanted = set.spec?.replicas ?? 1;
  if ((status.updatedReplicas ?? 0) < wanted)
    return {
      state: 'progressing',
      detail: `StatefulSet ${name}: ${status.updatedReplicas ?? 0} of ${wanted} replicas updated`,
    };
  if ((status.readyReplicas ?? 0) < wanted)
    return {
      state: 'progressing',
      detail: `StatefulSet ${name}: ${status.readyReplicas ?? 0} of ${wanted} replicas ready`,
    };
  if (
    status.updateRevision !== undefined &&
    status.currentRevision !== undefined &&
    status.updateRevision !== status.currentRevision
  ) {
    return { state: 'progressing', detail: `StatefulSet ${name}: replicas still on the previous revision` };
  }
  return { state: 'complete' };
}

/**
 * A StatefulSet has no progress deadline of its own (the database would wait forever for a volume
 * that never binds, or a node that never fits it): a pod of it that has not been ready for longer than
 * the Deployments' `progressDeadlineSeconds` fails the rollout the same way. Null while within it.
 */
export function statefulSetStalled(
  set: V1StatefulSet,
  pods: readonly V1Pod[],
  nowMs: number,
  deadlineSeconds: number,
): Rollout | null {
  const notReady = pods.filter(
    (pod) =>
      !pod.metadata?.deletionTimestamp &&
      !(pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True') &&
      !(
        (pod.status?.containerStatuses ?? []).length > 0 && (pod.status?.containerStatuses ?? []).every((c) => c.ready)
      ),
  );
  const oldest = Math.min(...notReady.map((pod) => new Date(pod.metadata?.creationTimestamp ?? nowMs).getTime()));
  if (!Number.isFinite(oldest) || nowMs - oldest <= deadlineSeconds * 1000) return null;
  const waited = Math.round((nowMs - oldest) / 1000);
  return {
    state: 'failed',
    reason: 'progress_deadline_exceeded',
    message: `StatefulSet ${set.metadata?.name ?? '?'} made no progress within its deadline: a pod has not been ready for ${waited} s (the deadline is ${deadlineSeconds} s)${waitingDetail(pods)}`,
  };
}

/** The first failure fails the whole; it has started when every part has; all complete is complete. */
export function combine(rollouts: readonly Rollout[]): Rollout {
  return (
    rollouts.find((r) => r.state === 'failed') ??
    rollouts.find((r) => r.state === 'pending') ??
    rollouts.find((r) => r.state === 'progressing') ?? { state: 'complete' }
  );
}
