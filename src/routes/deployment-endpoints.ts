/**
 * Endpoints of a deployment (docs/app-urls.md, "Endpoints"): named addresses pinned to its revisions,
 * each at `<slug>--<name>.<apps domain>`. Put one at a revision another endpoint serves to promote it:
 * the same sealed build, no rebuild.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { ENDPOINT_NAME_PATTERN, LABEL_MAX } from '../domain/endpoints.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { needs } from '../http/route-needs.ts';
import { DateTime, Nullable, Uuid, errorResponses } from '../http/schema-helpers.ts';
import type { EndpointActor, EndpointService, EndpointView } from '../service/deployment-endpoints.ts';

const EndpointName = Type.String({
  pattern: ENDPOINT_NAME_PATTERN,
  minLength: 1,
  maxLength: LABEL_MAX,
  description:
    "Lowercase letters, digits and inner dashes; no '--', not ending in '-' and 8 or 16 hex digits, and short enough " +
    'that `<slug>--<name>` is a DNS label (63 characters).',
});

const Endpoint = Type.Object(
  {
    name: Type.String(),
    deployment_id: Uuid(),
    revision_id: Uuid({ description: 'The revision the endpoint is pinned to.' }),
    served_revision_id: Nullable(
      Uuid({
        description:
          'The revision the own data plane serves at the endpoint now; it equals revision_id once a move is done, ' +
          'and is null until the first revision there is healthy.',
      }),
    ),
    url: Nullable(
      Type.String({
        description: '`<scheme>://<slug>--<name>.<apps domain>[:port]`; null until the deployment has a stable URL.',
      }),
    ),
    created_at: DateTime(),
    updated_at: DateTime(),
  },
  { title: 'DeploymentEndpoint' },
);

const EndpointList = Type.Object(
  { resources: Type.Array(Endpoint, { description: "The deployment's endpoints, by name." }) },
  { title: 'DeploymentEndpointList' },
);

const DeploymentParams = Type.Object({ deployment_id: Uuid() });
const EndpointParams = Type.Object({ deployment_id: Uuid(), endpoint_name: EndpointName });

const response = (e: EndpointView) => ({
  name: e.name,
  deployment_id: e.deployment_id,
  revision_id: e.revision_id,
  served_revision_id: e.served_revision_id,
  url: e.url,
  created_at: e.created_at.toISOString(),
  updated_at: e.updated_at.toISOString(),
});

const actorOf = (request: FastifyRequest): EndpointActor => ({
  keyId: request.caller.keyId,
  keyName: request.caller.keyName,
});

export const deploymentEndpointRoutes: FastifyPluginAsyncTypebox<{ endpoints: EndpointService }> = async (
  app,
  { endpoints },
) => {
  app.get(
    '/v2/deployments/:deployment_id/endpoints',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listDeploymentEndpoints',
        tags: ['endpoints'],
        summary: "List a deployment's endpoints",
        params: DeploymentParams,
        response: { 200: EndpointList, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => ({
      resources: (await endpoints.list(workspaceOf(request), request.params.deployment_id)).map(response),
    }),
  );

  app.get(
    '/v2/deployments/:deployment_id/endpoints/:endpoint_name',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'getDeploymentEndpoint',
        tags: ['endpoints'],
        summary: 'Get an endpoint',
        params: EndpointParams,
        response: { 200: Endpoint, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) =>
      response(await endpoints.get(workspaceOf(request), request.params.deployment_id, request.params.endpoint_name)),
  );

  app.put(
    '/v2/deployments/:deployment_id/endpoints/:endpoint_name',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'putDeploymentEndpoint',
        tags: ['endpoints'],
        summary: 'Create an endpoint, or move it to another revision',
        description:
          'Pins the endpoint to a DEPLOYED revision of the deployment. The own data plane starts that revision ' +
          'from its sealed build (no rebuild, with the secrets the revision was made with) beside what serves there, ' +
          'switches the route once it is healthy, and drains the old instances. Promoting is putting the revision ' +
          'another endpoint serves. 201 when the endpoint is new, 200 when it existed. A deployment on a listener ' +
          'has no endpoints (400).',
        params: EndpointParams,
        body: Type.Object({ revision_id: Uuid() }),
        response: { 200: Endpoint, 201: Endpoint, ...errorResponses(400, 401, 403, 404, 409, 422) },
      },
    },
    async (request, reply) => {
      const { endpoint, created } = await endpoints.put(
        workspaceOf(request),
        request.params.deployment_id,
        request.params.endpoint_name,
        request.body.revision_id,
        actorOf(request),
      );
      return reply.status(created ? 201 : 200).send(response(endpoint));
    },
  );

  app.delete(
    '/v2/deployments/:deployment_id/endpoints/:endpoint_name',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'deleteDeploymentEndpoint',
        tags: ['endpoints'],
        summary: 'Delete an endpoint',
        description: "Its instances are drained and stopped; the deployment's own URL is not affected.",
        params: EndpointParams,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await endpoints.remove(
        workspaceOf(request),
        request.params.deployment_id,
        request.params.endpoint_name,
        actorOf(request),
      );
      return reply.status(204).send(null);
    },
  );
};
