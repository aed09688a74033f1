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
import {
  MAX_SPLIT_WEIGHT,
  MIN_ROLLBACK_REQUESTS,
  MIN_SPLIT_WEIGHT,
  ROLLBACK_WINDOW_MAX_SECONDS,
  ROLLBACK_WINDOW_MIN_SECONDS,
} from '../domain/endpoint-splits.ts';
import {
  endpointView,
  type EndpointActor,
  type EndpointService,
  type EndpointView,
} from '../service/deployment-endpoints.ts';
import type { SplitService } from '../service/endpoint-splits.ts';

const EndpointName = Type.String({
  pattern: ENDPOINT_NAME_PATTERN,
  minLength: 1,
  maxLength: LABEL_MAX,
  description:
    "Lowercase letters, digits and inner dashes; no '--', not ending in '-' and 8 or 16 hex digits, and short enough " +
    'that `<slug>--<name>` is a DNS label (63 characters).',
});

const Rollback = Type.Object(
  {
    max_error_rate_increase: Type.Number({
      minimum: 0,
      maximum: 1,
      description:
        "How much higher the split revision's 5xx rate (a fraction of its requests) may be than the endpoint revision's before the split is taken back. Default 0.05.",
    }),
    max_p99_increase_ms: Nullable(
      Type.Integer({
        minimum: 1,
        maximum: 600000,
        description:
          'How much higher its p99 latency may be, in milliseconds; null (the default): latency is not compared.',
      }),
    ),
    window_seconds: Type.Integer({
      minimum: ROLLBACK_WINDOW_MIN_SECONDS,
      maximum: ROLLBACK_WINDOW_MAX_SECONDS,
      description: 'The window both revisions are compared over. Default 300.',
    }),
    min_requests: Type.Integer({
      minimum: MIN_ROLLBACK_REQUESTS,
      maximum: 1000000,
      description: 'Requests the split revision must have had in the window before anything is decided. Default 50.',
    }),
  },
  { title: 'SplitRollback' },
);

const Split = Type.Object(
  {
    revision_id: Uuid({ description: 'The second revision, which takes `weight` percent of the clients.' }),
    weight: Type.Integer({ minimum: MIN_SPLIT_WEIGHT, maximum: MAX_SPLIT_WEIGHT }),
    served: Type.Boolean({
      description:
        "Whether its data plane sends it its share now: the own data plane once its instances started and are healthy; a listener once its Deployment rolled out and the cluster's Gateway accepted the weighted HTTPRoute. Until then the endpoint's revision takes all the traffic. A new weight makes it false again until the data plane serves that weight.",
    }),
    not_served_reason: Nullable(
      Type.String({
        description:
          'Why it takes none of the traffic, in plain words, as its data plane last said (on a listener: no Gateway API in this cluster, SLIPWAY_LISTENER_GATEWAY not set, the gateway refused the route: ...); null when served, or while nothing was said yet.',
      }),
    ),
    sticky: Type.Boolean({
      description:
        'Whether each client (a cookie, or the X-Slipway-Sticky header) and each LangGraph thread stays on the revision that first served it. True on the own data plane; false on a listener, whose Gateway weighs each request on its own.',
    }),
    rollback: Nullable(Rollback),
    started_at: DateTime(),
  },
  { title: 'DeploymentEndpointSplit' },
);

const SplitBody = Type.Object({
  revision_id: Uuid(),
  weight: Type.Integer({
    minimum: MIN_SPLIT_WEIGHT,
    maximum: MAX_SPLIT_WEIGHT,
    description: 'Percent of clients (and of LangGraph threads) sent to the revision, 1 to 99.',
  }),
  rollback: Type.Optional(
    Nullable(
      Type.Partial(Rollback, {
        description:
          'Take the split back by itself when the revision does worse than the endpoint revision. Omitted: no automatic rollback.',
      }),
    ),
  ),
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
    // The endpoint's traffic split: a share of its clients sent to a second revision; null: none.
    split: Nullable(Split),
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
  split:
    e.split_revision_id === null || e.split_weight === null || e.split_started_at === null
      ? null
      : {
          revision_id: e.split_revision_id,
          weight: e.split_weight,
          served: e.split_served_revision_id === e.split_revision_id,
          not_served_reason: e.split_served_revision_id === e.split_revision_id ? null : e.split_not_served_reason,
          sticky: !e.on_listener,
          rollback: e.split_rollback,
          started_at: e.split_started_at.toISOString(),
        },
  created_at: e.created_at.toISOString(),
  updated_at: e.updated_at.toISOString(),
});

const SPLIT_DESCRIPTION =
  "Sends `weight` percent of the endpoint's clients to a DEPLOYED revision of the deployment, started from its " +
  'sealed build beside the endpoint revision and health-checked before any traffic. Each client stays on one ' +
  'revision for the life of the split (a cookie the edge sets, or the `X-Slipway-Sticky` header it sends), and ' +
  'each LangGraph thread on the revision that first served it. A PUT with another weight widens or narrows it. ' +
  "End it with DELETE, or promote the revision by putting it as the endpoint's revision. `rollback` takes the " +
  'split back by itself when the revision does worse than the endpoint revision over a window. Neither an ' +
  "open pull request's preview endpoint (400 `endpoint_name_reserved`) nor a preview revision (400 " +
  '`preview_revision_reserved`) takes part in a split. On a listener the ' +
  "cluster's Gateway weighs each request (no client or thread stays on a revision: `split.sticky` is false), the " +
  'split is served only where it has the Gateway API (`split.served`, `split.not_served_reason`), and `rollback` is refused (400).';

const actorOf = (request: FastifyRequest): EndpointActor => ({
  keyId: request.caller.keyId,
  keyName: request.caller.keyName,
});

export const deploymentEndpointRoutes: FastifyPluginAsyncTypebox<{
  endpoints: EndpointService;
  splits: SplitService;
}> = async (app, { endpoints, splits }) => {
  app.put(
    '/v2/deployments/:deployment_id/endpoints/:endpoint_name/split',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'putDeploymentEndpointSplit',
        tags: ['endpoints'],
        summary: "Split an endpoint's traffic with a second revision, or change the split",
        description: SPLIT_DESCRIPTION,
        params: EndpointParams,
        body: SplitBody,
        response: { 200: Endpoint, ...errorResponses(400, 401, 403, 404, 422) },
      },
    },
    async (request) => {
      const { params, body } = request;
      // The previews' rules (src/service/preview-endpoints.ts), which the split service does not know.
      await endpoints.checkSplit(workspaceOf(request), params.deployment_id, params.endpoint_name, body.revision_id);
      const { deployment, row } = await splits.set(
        workspaceOf(request),
        params.deployment_id,
        params.endpoint_name,
        {
          revisionId: body.revision_id,
          weight: body.weight,
          rollback: body.rollback,
        },
        actorOf(request),
      );
      return response(endpointView(deployment, row));
    },
  );

  app.delete(
    '/v2/deployments/:deployment_id/endpoints/:endpoint_name/split',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'deleteDeploymentEndpointSplit',
        tags: ['endpoints'],
        summary: "Take an endpoint's traffic split back",
        description:
          "Every client goes to the endpoint's revision again; the split revision's instances are drained and stopped.",
        params: EndpointParams,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await splits.remove(
        workspaceOf(request),
        request.params.deployment_id,
        request.params.endpoint_name,
        actorOf(request),
      );
      return reply.status(204).send(null);
    },
  );

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
          'another endpoint serves. 201 when the endpoint is new, 200 when it existed. On a listener, the agent runs the ' +
          "revision as a Kubernetes Deployment and Service of the endpoint's own, and the endpoint has no URL of the service's. " +
          "A pull request's preview revision serves only at its `pr-<number>` endpoint (400 `preview_revision_reserved`).",
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
        description:
          "Its instances are drained and stopped; the deployment's own URL is not affected. The endpoint of an open " +
          "pull request's preview (`pr-<number>`) goes only when the pull request closes: deleting it is a 400 " +
          '`endpoint_name_reserved`.',
        params: EndpointParams,
        response: { 204: Type.Null(), ...errorResponses(400, 401, 403, 404, 422) },
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
