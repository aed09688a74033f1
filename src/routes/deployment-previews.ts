/**
 * Pull-request previews of a codehost deployment (docs/codehost.md, "Pull-request previews"): the open
 * pull requests that have (or were refused) a preview, and the deployment's preview settings. Previews are
 * made and removed by the code host's `pull_request` webhooks, never through these routes; each is served
 * at the endpoint `pr-<number>` (src/routes/deployment-endpoints.ts lists it with the others).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { MAX_ENDPOINTS_PER_DEPLOYMENT } from '../domain/endpoints.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { needs } from '../http/route-needs.ts';
import { DateTime, Nullable, StringEnum, Uuid, errorResponses } from '../http/schema-helpers.ts';
import type { PreviewService, PreviewSettingsView, PreviewView } from '../service/pull-request-previews.ts';

const Preview = Type.Object(
  {
    pull_request: Type.Integer({ description: 'The pull request number.' }),
    endpoint: Type.String({ description: 'The endpoint the preview is served at: `pr-<number>`.' }),
    url: Nullable(Type.String({ description: "The preview's URL, `<scheme>://<slug>--pr-<number>.<apps domain>`." })),
    repository: Type.String({ description: 'The base repository (`owner/name`), where the commit status goes.' }),
    head_sha: Type.String({ description: "The pull request's head commit the preview is of." }),
    head_repository: Type.String({ description: 'The repository the head commit comes from (`owner/name`).' }),
    from_fork: Type.Boolean({ description: 'The head lives in another repository than the base.' }),
    secrets: Type.Boolean({
      description:
        "Whether the preview runs with the deployment's secrets, database and agent credential (false for a fork's, " +
        'unless fork_secrets allowed it when the revision was made).',
    }),
    revision_id: Nullable(Uuid({ description: 'The revision of head_sha; null when the preview was refused.' })),
    served_revision_id: Nullable(Uuid({ description: 'The revision the endpoint serves now, once it serves.' })),
    refused_message: Nullable(
      Type.String({ description: 'Why the pull request got no preview (over the limit, ...).' }),
    ),
    status_state: Nullable(
      StringEnum(['pending', 'success', 'failure', 'error'] as const, {
        description: 'The commit status last posted to the pull request for head_sha; null before the first.',
      }),
    ),
    created_at: DateTime(),
    updated_at: DateTime(),
  },
  { title: 'PullRequestPreview' },
);

const PreviewList = Type.Object(
  { resources: Type.Array(Preview, { description: 'Open pull requests with a preview, oldest first.' }) },
  { title: 'PullRequestPreviewList' },
);

const Settings = Type.Object(
  {
    deployment_id: Uuid(),
    max_previews: Nullable(
      Type.Integer({ description: "The deployment's own limit; null: the service's SLIPWAY_PREVIEWS_PER_DEPLOYMENT." }),
    ),
    effective_max_previews: Type.Integer({ description: 'The limit that applies; 0: no previews.' }),
    fork_secrets: Type.Boolean({
      description:
        "Whether pull requests from forks get the deployment's secrets, database and agent credential (default false).",
    }),
  },
  { title: 'PreviewSettings' },
);

const SettingsPatch = Type.Object({
  max_previews: Type.Optional(
    Nullable(
      Type.Integer({
        minimum: 0,
        maximum: MAX_ENDPOINTS_PER_DEPLOYMENT,
        description: `Open pull requests with a preview at once (0 to ${MAX_ENDPOINTS_PER_DEPLOYMENT}; 0 turns previews off; null: the service's default). Over it, a new pull request is refused and its commit status says so; open previews are kept.`,
      }),
    ),
  ),
  fork_secrets: Type.Optional(
    Type.Boolean({
      description:
        "Give pull requests from forks the deployment's secrets, database and agent credential: anyone who can open a " +
        'pull request then runs code with them. Applies to previews built after the change.',
    }),
  ),
});

const DeploymentParams = Type.Object({ deployment_id: Uuid() });

const previewResponse = (p: PreviewView) => ({
  pull_request: p.pull_request,
  endpoint: p.endpoint,
  url: p.url,
  repository: p.repository,
  head_sha: p.head_sha,
  head_repository: p.head_repository,
  from_fork: p.from_fork,
  secrets: p.secrets,
  revision_id: p.revision_id,
  served_revision_id: p.served_revision_id,
  refused_message: p.refused_message,
  status_state: p.status_state,
  created_at: p.created_at.toISOString(),
  updated_at: p.updated_at.toISOString(),
});

const settingsResponse = (s: PreviewSettingsView) => s;

export const deploymentPreviewRoutes: FastifyPluginAsyncTypebox<{ previews: PreviewService }> = async (
  app,
  { previews },
) => {
  app.get(
    '/v2/deployments/:deployment_id/previews',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listDeploymentPreviews',
        tags: ['endpoints'],
        summary: "List a deployment's pull-request previews",
        params: DeploymentParams,
        response: { 200: PreviewList, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => ({
      resources: (await previews.list(workspaceOf(request), request.params.deployment_id)).map(previewResponse),
    }),
  );

  app.get(
    '/v2/deployments/:deployment_id/preview-settings',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'getDeploymentPreviewSettings',
        tags: ['endpoints'],
        summary: "Get a deployment's preview settings",
        params: DeploymentParams,
        response: { 200: Settings, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => settingsResponse(await previews.getSettings(workspaceOf(request), request.params.deployment_id)),
  );

  app.patch(
    '/v2/deployments/:deployment_id/preview-settings',
    {
      // Giving forks the secrets hands them to anyone who can open a pull request: an admin's decision.
      config: needs({ auth: 'workspace', admin: true }),
      schema: {
        operationId: 'updateDeploymentPreviewSettings',
        tags: ['endpoints'],
        summary: "Change a deployment's preview settings",
        description: 'An admin key only. Fields left out keep their value. Codehost deployments only (400 otherwise).',
        params: DeploymentParams,
        body: SettingsPatch,
        response: { 200: Settings, ...errorResponses(400, 401, 403, 404, 422) },
      },
    },
    async (request) =>
      settingsResponse(
        await previews.updateSettings(workspaceOf(request), request.params.deployment_id, request.body, {
          keyId: request.caller.keyId,
          keyName: request.caller.keyName,
        }),
      ),
  );
};
