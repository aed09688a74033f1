/**
 * What the own data plane should serve at the endpoints of the deployments it runs (docs/app-urls.md,
 * "Endpoints" and "Traffic split"), read from the database: each endpoint's revision and, when it has a
 * traffic split, the split's revision and weight, as jobs the runtime starts from their sealed builds.
 */
import type { Kysely } from 'kysely';
import { endpointsToServe } from '../store/deployment-endpoints.ts';
import type { Database, RevisionRow } from '../store/schema.ts';
import { jobOf } from './adoption.ts';
import type { WantedEndpoint } from './local-runtime-types.ts';

export interface DeploymentEndpointWants {
  wanted: WantedEndpoint[];
  /** The revision the service last recorded as served at each endpoint. */
  marked: Map<string, string | null>;
  /** The same, of each endpoint's split revision. */
  markedSplits: Map<string, string | null>;
}

export async function endpointWants(
  db: Kysely<Database>,
  deploymentIds: string[],
): Promise<Map<string, DeploymentEndpointWants>> {
  const rows = await endpointsToServe(db, deploymentIds);
  const splitIds = [...new Set(rows.flatMap((row) => row.endpoint_split_revision_id ?? []))];
  const splitRevisions = new Map<string, RevisionRow>(
    splitIds.length === 0
      ? []
      : (await db.selectFrom('revisions').selectAll().where('id', 'in', splitIds).execute()).map((r) => [r.id, r]),
  );
  const wants = new Map<string, DeploymentEndpointWants>();
  for (const deploymentId of deploymentIds) {
    const mine = rows.filter((row) => row.deployment_id === deploymentId);
    const want: DeploymentEndpointWants = {
      wanted: [],
      marked: new Map(mine.map((row) => [row.endpoint_name, row.endpoint_served_revision_id])),
      markedSplits: new Map(mine.map((row) => [row.endpoint_name, row.endpoint_split_served_revision_id])),
    };
    for (const row of mine) {
      if (row.deployment_status === 'AWAITING_DELETE') continue;
      const deployment = {
        id: deploymentId,
        workspace_id: row.deployment_workspace_id,
        name: row.deployment_name,
        app_slug: row.deployment_app_slug,
        source_config: row.deployment_source_config,
        tracing_project_id: row.deployment_tracing_project_id,
      };
      const splitRevision =
        row.endpoint_split_revision_id === null ? undefined : splitRevisions.get(row.endpoint_split_revision_id);
      want.wanted.push({
        name: row.endpoint_name,
        job: jobOf(row, deployment),
        split:
          splitRevision === undefined || row.endpoint_split_weight === null
            ? null
            : { job: jobOf(splitRevision, deployment), weight: row.endpoint_split_weight },
      });
    }
    wants.set(deploymentId, want);
  }
  return wants;
}
