/**
 * A preview revision that has built is pinned to its pull request's endpoint (docs/codehost.md,
 * "Pull-request previews"). Called by the lifecycle (src/service/lifecycle.ts) when it records the revision
 * DEPLOYED, in that transaction, instead of making it the deployment's active revision: the own data plane
 * then serves it at `<slug>--pr-<number>` like any endpoint (src/dataplane/endpoint-apps.ts).
 */
import { previewEndpointName } from '../codehost/pull-request-event.ts';
import { getEndpoint, putEndpoint } from '../store/deployment-endpoints.ts';
import { recordEvents } from '../store/events.ts';
import { getPreview } from '../store/pull-request-previews.ts';
import type { Db } from '../store/schema.ts';

/**
 * Pins the endpoint of the revision's pull request to it, when the preview still asks for this revision (a
 * newer push, or the close of the pull request, may have come meanwhile: then nothing is pinned).
 */
export async function pinPreviewEndpoint(
  tx: Db,
  deployment: { id: string; workspace_id: string },
  revision: { id: string; preview_pull_request: number | null },
): Promise<boolean> {
  const number = revision.preview_pull_request;
  if (number === null) return false;
  const preview = await getPreview(tx, deployment.id, number);
  if (!preview || preview.revision_id !== revision.id) return false;
  const name = previewEndpointName(number);
  const before = await getEndpoint(tx, deployment.id, name);
  if (before?.revision_id === revision.id) return true;
  await putEndpoint(tx, deployment.id, name, revision.id);
  await recordEvents(tx, [
    {
      workspaceId: deployment.workspace_id,
      subjectType: 'deployment',
      subjectId: deployment.id,
      deploymentId: deployment.id,
      type: 'deployment.endpoint_set',
      data: {
        endpoint: name,
        from_revision_id: before?.revision_id ?? null,
        to_revision_id: revision.id,
        by: { pull_request: number },
      },
    },
  ]);
  return true;
}
