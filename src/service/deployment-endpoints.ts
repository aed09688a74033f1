/**
 * Endpoints of deployments (docs/app-urls.md, "Endpoints"): list, create or move, delete. A move pins
 * the endpoint to a revision of the same deployment that deployed; the own data plane then serves that
 * revision's sealed build there (src/dataplane/endpoint-runtime.ts), a listener a Kubernetes Deployment
 * and Service of the endpoint's own (the desired state carries it: src/service/listener-protocol.ts). Every change is an event that says
 * who made it and from which revision to which.
 */
import type { Kysely } from 'kysely';
import {
  endpointLabel,
  endpointNameProblem,
  isPreviewEndpointName,
  MAX_ENDPOINTS_PER_DEPLOYMENT,
} from '../domain/endpoints.ts';
import { AppError, notFound } from '../errors.ts';
import {
  countEndpoints,
  deleteEndpoint,
  getEndpoint,
  listEndpoints,
  putEndpoint,
} from '../store/deployment-endpoints.ts';
import { getDeployment, lockDeployment } from '../store/deployments.ts';
import { recordEvents } from '../store/events.ts';
import { getRevision } from '../store/revisions.ts';
import type { Database, DeploymentEndpointRow, DeploymentRow } from '../store/schema.ts';
import { endSplit } from './endpoint-splits.ts';
import { assertNotPreviewEndpoint, assertNotPreviewRevision } from './preview-endpoints.ts';
import { checkEndpointQuota, type ResourcePolicy } from './resource-quotas.ts';

export interface EndpointServiceDeps {
  db: Kysely<Database>;
  /** The workspace quotas: each endpoint runs a copy of its deployment's instances. Null: none applied. */
  resources: ResourcePolicy | null;
}

/** Who asks, for the events: the API key (or sign-in session) that made the change. */
export interface EndpointActor {
  keyId: string;
  keyName: string;
}

export interface EndpointView extends DeploymentEndpointRow {
  /** `<scheme>://<slug>--<name>.<apps domain>[:port]`; null until the deployment has a stable URL. */
  url: string | null;
  /** The deployment runs on a listener: its cluster's Gateway serves the endpoint (docs/listener.md). */
  on_listener: boolean;
}

/** An endpoint as the API shows it. */
export function endpointView(deployment: DeploymentRow, row: DeploymentEndpointRow): EndpointView {
  return {
    ...row,
    // A listener's cluster exposes its endpoints itself (docs/listener.md, "Endpoints"): no URL of the edge's.
    url: deployment.listener_id === null ? endpointUrl(deployment, row.name) : null,
    on_listener: deployment.listener_id !== null,
  };
}

/** The endpoint's URL: the deployment's stable URL with `--<name>` after the slug. */
export function endpointUrl(
  deployment: Pick<DeploymentRow, 'app_slug' | 'source_config'>,
  name: string,
): string | null {
  const stable = deployment.source_config.custom_url;
  if (typeof stable !== 'string') return null;
  const marker = `//${deployment.app_slug}.`;
  const at = stable.indexOf(marker);
  if (at < 0) return null;
  return `${stable.slice(0, at)}//${endpointLabel(deployment.app_slug, name)}.${stable.slice(at + marker.length)}`;
}

export function createEndpointService({ db, resources }: EndpointServiceDeps) {
  const view = endpointView;

  async function deploymentOf(workspaceId: string, deploymentId: string) {
    const deployment = await getDeployment(db, workspaceId, deploymentId);
    if (!deployment) throw notFound('Deployment', deploymentId);
    return deployment;
  }

  return {
    async list(workspaceId: string, deploymentId: string): Promise<EndpointView[]> {
      const deployment = await deploymentOf(workspaceId, deploymentId);
      return (await listEndpoints(db, deploymentId)).map((row) => view(deployment, row));
    },

    async get(workspaceId: string, deploymentId: string, name: string): Promise<EndpointView> {
      const deployment = await deploymentOf(workspaceId, deploymentId);
      const row = await getEndpoint(db, deploymentId, name);
      if (!row) throw new AppError('not_found', `Endpoint ${name} not found.`);
      return view(deployment, row);
    },

    /** Creates the endpoint or moves it to the revision; `created` tells which (201 or 200). */
    async put(
      workspaceId: string,
      deploymentId: string,
      name: string,
      revisionId: string,
      actor: EndpointActor,
    ): Promise<{ endpoint: EndpointView; created: boolean }> {
      return db.transaction().execute(async (tx) => {
        // Locked: a delete of the deployment, or another move of its endpoints, waits for this one.
        const deployment = await lockDeployment(tx, workspaceId, deploymentId);
        if (!deployment || deployment.status === 'AWAITING_DELETE') throw notFound('Deployment', deploymentId);
        const problem = endpointNameProblem(name, deployment.app_slug);
        if (problem) throw new AppError('invalid_request', `name: ${problem}.`);
        if (isPreviewEndpointName(name))
          throw new AppError(
            'endpoint_name_reserved',
            `name: '${name}' is kept for the preview of pull request #${name.slice(3)}, which its webhooks make and move; use another name.`,
          );
        const revision = await getRevision(tx, workspaceId, deploymentId, revisionId.toLowerCase());
        if (!revision)
          throw new AppError(
            'invalid_reference',
            `revision_id: Revision ID ${revisionId} not found in this deployment.`,
          );
        assertNotPreviewRevision(revision, name);
        if (revision.status !== 'DEPLOYED')
          throw new AppError(
            'invalid_request',
            `revision_id: revision ${revision.id} is ${revision.status}; only a revision that built and deployed (DEPLOYED) can be served at an endpoint.`,
          );
        const before = await getEndpoint(tx, deploymentId, name);
        if (!before && (await countEndpoints(tx, deploymentId)) >= MAX_ENDPOINTS_PER_DEPLOYMENT)
          throw new AppError(
            'conflict',
            `The deployment has ${MAX_ENDPOINTS_PER_DEPLOYMENT} endpoints, as many as a deployment may have; delete one first.`,
          );
        // A listener's cluster is not the workspace's quota (its deployments are not counted either).
        if (!before && resources && deployment.listener_id === null)
          await checkEndpointQuota(tx, resources, workspaceId, deployment.source_config.resource_spec ?? null);
        // A move ends a split: promoted when the endpoint moves to the split's revision.
        if (before && before.revision_id !== revision.id)
          await endSplit(tx, deployment, before, {
            kind: before.split_revision_id === revision.id ? 'promoted' : 'moved',
            actor,
            toRevisionId: revision.id,
          });
        const row = await putEndpoint(tx, deploymentId, name, revision.id);
        if (before?.revision_id !== revision.id)
          await recordEvents(tx, [
            {
              workspaceId,
              subjectType: 'deployment',
              subjectId: deploymentId,
              deploymentId,
              type: 'deployment.endpoint_set',
              data: {
                endpoint: name,
                from_revision_id: before?.revision_id ?? null,
                to_revision_id: revision.id,
                by: { api_key_id: actor.keyId, name: actor.keyName },
              },
            },
          ]);
        return { endpoint: view(deployment, row), created: !before };
      });
    },

    /**
     * Refuses a split that the pull-request previews' rules forbid, before the split service is asked: on
     * an open preview's endpoint, or of a preview's revision (src/service/preview-endpoints.ts). A revision
     * not found is left to the split service to answer.
     */
    async checkSplit(workspaceId: string, deploymentId: string, name: string, revisionId: string): Promise<void> {
      await deploymentOf(workspaceId, deploymentId);
      await assertNotPreviewEndpoint(db, deploymentId, name, 'split');
      const revision = await getRevision(db, workspaceId, deploymentId, revisionId.toLowerCase());
      if (revision) assertNotPreviewRevision(revision, null);
    },

    async remove(workspaceId: string, deploymentId: string, name: string, actor: EndpointActor): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const deployment = await lockDeployment(tx, workspaceId, deploymentId);
        if (!deployment) throw notFound('Deployment', deploymentId);
        const before = await getEndpoint(tx, deploymentId, name);
        if (!before) throw new AppError('not_found', `Endpoint ${name} not found.`);
        await assertNotPreviewEndpoint(tx, deploymentId, name, 'deleted');
        if (!(await deleteEndpoint(tx, deploymentId, name)))
          throw new AppError('not_found', `Endpoint ${name} not found.`);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'deployment',
            subjectId: deploymentId,
            deploymentId,
            type: 'deployment.endpoint_deleted',
            data: {
              endpoint: name,
              from_revision_id: before.revision_id,
              by: { api_key_id: actor.keyId, name: actor.keyName },
            },
          },
        ]);
      });
    },
  };
}

export type EndpointService = ReturnType<typeof createEndpointService>;
