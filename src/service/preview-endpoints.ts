/**
 * A preview revision that has built is pinned to its pull request's endpoint (docs/codehost.md,
 * "Pull-request previews"). Called by the lifecycle (src/service/lifecycle.ts) when it records the revision
 * DEPLOYED, in that transaction, instead of making it the deployment's active revision: the own data plane
 * then serves it at `<slug>--pr-<number>` like any endpoint (src/dataplane/endpoint-apps.ts).
 *
 * The endpoint and the revision are the pull request's alone: the endpoints API may neither delete nor
 * split the endpoint of an open preview, nor put a preview revision anywhere else or redeploy it
 * (`assertNotPreviewEndpoint`, `assertNotPreviewRevision`).
 */
import { previewEndpointName } from '../codehost/pull-request-event.ts';
import { isPreviewEndpointName } from '../domain/endpoints.ts';
import { AppError } from '../errors.ts';
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

/**
 * Refuses a change by hand (`deleted`, `split`) of the endpoint of an open pull request's preview: its pull
 * request's webhooks move it and its close removes it. A `pr-<number>` endpoint without an open preview (one
 * made by hand before such names were kept) is anyone's.
 */
export async function assertNotPreviewEndpoint(
  tx: Db,
  deploymentId: string,
  name: string,
  change: 'deleted' | 'split',
): Promise<void> {
  if (!isPreviewEndpointName(name)) return;
  const number = Number(name.slice(3));
  // Pull request numbers are PostgreSQL integers: a longer name is no pull request's.
  if (!(number <= 2_147_483_647) || !(await getPreview(tx, deploymentId, number))) return;
  throw new AppError(
    'endpoint_name_reserved',
    `Endpoint ${name} is the preview of pull request #${number}: it cannot be ${change} by hand; ` +
      'it goes when the pull request is closed or merged.',
  );
}

/**
 * Refuses to serve a pull request's preview revision anywhere but at its pull request's endpoint (at
 * `endpoint`; null: as a split's revision, or as the deployment by a redeploy). It is built from a commit nobody
 * merged, a fork's without the deployment's secrets, and its instances use the preview's data directory:
 * at `production` it would serve unreviewed code with the wrong data (docs/codehost.md).
 */
export function assertNotPreviewRevision(
  revision: { id: string; preview_pull_request: number | null },
  endpoint: string | null,
): void {
  const number = revision.preview_pull_request;
  if (number === null || endpoint === previewEndpointName(number)) return;
  throw new AppError(
    'preview_revision_reserved',
    `revision_id: revision ${revision.id} is the preview of pull request #${number} and is served only at ` +
      `${previewEndpointName(number)}; merge the pull request and use the revision its push builds.`,
  );
}
