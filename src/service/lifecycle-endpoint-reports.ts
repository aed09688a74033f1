/**
 * A listener's reports of its endpoints (ListenerPlaneReports of src/domain/data-plane.ts): the endpoint's
 * own Kubernetes Deployment runs the revision it is pinned to (`served_revision_id` moves there, with
 * `deployment.endpoint_served`), or cannot (`deployment.endpoint_failed`, what served before goes on).
 * The rules are the own data plane's (src/service/lifecycle-reports.ts, reportEndpoint): a report about
 * a revision the endpoint no longer asks for, or one that moves nothing, changes nothing. A report about
 * the endpoint's split says whether its revision takes its share of the requests on the cluster, or why
 * not (`split.served`, `split.not_served_reason`): a change is a `deployment.endpoint_split_served` or
 * `deployment.endpoint_split_failed` event; one about another split than the endpoint has now, nothing.
 */
import type { Kysely } from 'kysely';
import type { ListenerEndpointReport } from '../domain/data-plane.ts';
import { notFound } from '../errors.ts';
import { getEndpoint, setEndpointServed, setSplitState } from '../store/deployment-endpoints.ts';
import { lockDeploymentById } from '../store/deployments.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import type { Database, Db, DeploymentEndpointRow, DeploymentRow } from '../store/schema.ts';

/** Applies listener `listenerId`'s report of an endpoint; not_found for a deployment that is not its. */
export async function applyListenerEndpointReport(
  db: Kysely<Database>,
  listenerId: string,
  report: ListenerEndpointReport,
): Promise<{ applied: boolean }> {
  return db.transaction().execute(async (tx) => {
    // Locked as every writer of a deployment's endpoints locks it (src/service/deployment-endpoints.ts).
    const deployment = await lockDeploymentById(tx, report.deploymentId);
    // Another listener's deployment, or the own plane's, does not exist for this listener.
    if (!deployment || deployment.listener_id !== listenerId) throw notFound('Deployment', report.deploymentId);
    const endpoint = await getEndpoint(tx, deployment.id, report.endpoint);
    if (report.split)
      return { applied: endpoint ? await applySplitReport(tx, deployment, endpoint, report, report.split) : false };
    // Deleted or moved since: the desired state says what to serve next.
    if (!endpoint || endpoint.revision_id !== report.revisionId) return { applied: false };
    if (report.served) {
      if (endpoint.served_revision_id === report.revisionId) return { applied: false };
      await setEndpointServed(tx, deployment.id, report.endpoint, report.revisionId);
    }
    await recordEvents(tx, [
      {
        workspaceId: deployment.workspace_id,
        subjectType: 'deployment',
        subjectId: deployment.id,
        deploymentId: deployment.id,
        ...(report.served
          ? {
              type: 'deployment.endpoint_served' as const,
              data: {
                endpoint: report.endpoint,
                revision_id: report.revisionId,
                from_revision_id: endpoint.served_revision_id,
                listener_id: listenerId,
              },
            }
          : {
              type: 'deployment.endpoint_failed' as const,
              data: {
                endpoint: report.endpoint,
                revision_id: report.revisionId,
                message: report.message,
                listener_id: listenerId,
              },
            }),
      },
    ]);
    return { applied: true };
  });
}

/** A report about the endpoint's split: true when it changed what the endpoint shows. */
async function applySplitReport(
  tx: Db,
  deployment: DeploymentRow,
  endpoint: DeploymentEndpointRow,
  report: ListenerEndpointReport,
  { weight }: { weight: number },
): Promise<boolean> {
  // Another split since (taken back, another revision or weight): the desired state says what to serve.
  if (endpoint.split_revision_id !== report.revisionId || endpoint.split_weight !== weight) return false;
  const servedBefore = endpoint.split_served_revision_id === report.revisionId;
  if (report.served ? servedBefore : !servedBefore && endpoint.split_not_served_reason === report.message) return false;
  const split = { revisionId: report.revisionId, weight };
  await setSplitState(
    tx,
    deployment.id,
    endpoint.name,
    split,
    report.served ? { served: true } : { served: false, reason: report.message },
  );
  await recordEvents(tx, [splitEvent(deployment, endpoint.name, { revisionId: report.revisionId, weight }, report)]);
  return true;
}

/**
 * The event of a data plane's word on an endpoint's split (both planes): `deployment.endpoint_split_served`
 * or `deployment.endpoint_split_failed`, naming the listener when one said it.
 */
export function splitEvent(
  deployment: Pick<DeploymentRow, 'id' | 'workspace_id' | 'listener_id'>,
  endpoint: string,
  split: { revisionId: string; weight: number },
  state: { served: true } | { served: false; message: string },
): EventInput {
  const by = deployment.listener_id === null ? {} : { listener_id: deployment.listener_id };
  return {
    workspaceId: deployment.workspace_id,
    subjectType: 'deployment',
    subjectId: deployment.id,
    deploymentId: deployment.id,
    ...(state.served
      ? {
          type: 'deployment.endpoint_split_served' as const,
          data: { endpoint, split_revision_id: split.revisionId, weight: split.weight, ...by },
        }
      : {
          type: 'deployment.endpoint_split_failed' as const,
          data: { endpoint, split_revision_id: split.revisionId, message: state.message, ...by },
        }),
  };
}
