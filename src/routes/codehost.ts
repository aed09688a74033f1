/**
 * Code-host integrations (docs/codehost.md): create, list, get, patch and delete them, the
 * interface's repository listing (`GET /v1/integrations/forge/codehost/{integration_id}/repos`), and the
 * deliveries their push webhooks received. The webhook endpoint itself is in ./codehost-webhooks.ts.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Config } from '../config.ts';
import { workspaceOf } from '../http/authenticate.ts';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  ShownOnceString,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import type { CodehostIntegrationService } from '../service/codehost-integrations.ts';
import type { WebhookService } from '../service/codehost-webhooks.ts';
import type { CodehostIntegrationRow, Db } from '../store/schema.ts';
import { DELIVERIES_KEPT, REJECTED_DELIVERIES_KEPT } from '../store/webhook-deliveries.ts';
import { Delivery, deliveryResponse } from './codehost-deliveries.ts';
import { codehostWebhookRoutes } from './codehost-webhooks.ts';
import { needs } from '../http/route-needs.ts';

const BASE = '/v1/integrations/forge/codehost';

const integrationFields = {
  id: Uuid(),
  name: Type.String(),
  kind: StringEnum(['token', 'app'] as const, {
    description: 'token: an access token; app: a GitHub App installation.',
  }),
  api_url: Type.String({
    description:
      'The REST API of the host: https://api.github.com, or https://{host}/api/v3 for GitHub Enterprise Server.',
  }),
  app_id: Nullable(Type.String({ description: 'GitHub App id, for kind app.' })),
  installation_id: Nullable(Type.String({ description: 'GitHub App installation id, for kind app.' })),
  webhook_url: Type.String({ description: 'Payload URL to register as the push webhook on the code host.' }),
  created_at: DateTime(),
  updated_at: DateTime(),
};
const Integration = Type.Object(integrationFields, {
  title: 'CodehostIntegration',
  description: 'A code-host integration. Credentials and the webhook secret are write-only.',
});
const CreatedIntegration = Type.Object(
  {
    ...integrationFields,
    webhook_secret: ShownOnceString({
      description: 'Shown once, in this response only: register it with the webhook on the code host.',
    }),
  },
  {
    title: 'CodehostIntegrationCreated',
    description: 'The new integration, with its webhook secret (shown this once).',
  },
);

const NumericId = (description: string) =>
  Nullable(Type.Union([Type.Integer({ minimum: 1 }), Type.String({ pattern: '^[1-9][0-9]{0,19}$' })], { description }));

// token, private_key and webhook_secret have no type in the schema on purpose: a schema error echoes
// the value in its 422 item, and these are secrets. The service checks them and never echoes them.
const CreateBody = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: 100,
      pattern: '^[^\\x00-\\x1f\\x7f]+$',
      description: 'Unique in the workspace.',
    }),
    api_url: Type.Optional(
      Nullable(
        Type.String({ minLength: 1, maxLength: 2048, description: 'Default https://api.github.com. Must be https.' }),
      ),
    ),
    token: Type.Optional(
      Type.Unknown({
        description:
          'string, write-only: a personal access token or fine-grained token. Give either token, or app_id, private_key and installation_id.',
      }),
    ),
    app_id: Type.Optional(
      Nullable(
        Type.Union([Type.Integer({ minimum: 1 }), Type.String({ pattern: '^[A-Za-z0-9._-]{1,64}$' })], {
          description: 'GitHub App id (or client id).',
        }),
      ),
    ),
    private_key: Type.Optional(Type.Unknown({ description: 'string, write-only: the GitHub App private key (PEM).' })),
    installation_id: Type.Optional(NumericId('GitHub App installation id.')),
    webhook_secret: Type.Optional(
      Type.Unknown({
        description:
          'string of 16 to 256 characters, write-only. Generated when absent and shown once in the response.',
      }),
    ),
  },
  { title: 'CodehostIntegrationCreate' },
);

const UpdatedIntegration = Type.Object(
  {
    ...integrationFields,
    webhook_secret: Type.Optional(
      ShownOnceString({ description: 'Present, this once, when the patch set or rotated the webhook secret.' }),
    ),
  },
  {
    title: 'CodehostIntegrationUpdated',
    description: 'The integration; with its new webhook secret when the patch changed it.',
  },
);

const PatchBody = Type.Object(
  {
    name: Type.Optional(Nullable(CreateBody.properties.name)),
    api_url: Type.Optional(Type.Unknown({ description: 'Cannot change; the current value is accepted.' })),
    token: CreateBody.properties.token,
    app_id: CreateBody.properties.app_id,
    private_key: CreateBody.properties.private_key,
    installation_id: CreateBody.properties.installation_id,
    webhook_secret: CreateBody.properties.webhook_secret,
    rotate_webhook_secret: Type.Optional(
      Nullable(Type.Boolean({ description: 'Generate a new webhook secret, returned once in the response.' })),
    ),
  },
  { title: 'CodehostIntegrationPatch' },
);

const Repository = Type.Object(
  {
    host_integration_id: Uuid({ description: 'Integration ID; use as source_config.integration_id.' }),
    id: Type.Integer({ description: 'Repository ID on the code host.' }),
    name: Type.String(),
    owner: Type.String(),
    url: Type.String({ description: 'Use as source_config.repo_url.' }),
    default_branch: Type.String({ description: 'Use as source_revision_config.repo_ref.' }),
  },
  {
    title: 'CodehostRepository',
    additionalProperties: false,
    description: 'A repository reachable through the integration.',
  },
);

const Params = Type.Object({ integration_id: Uuid() });

export interface CodehostRouteDeps {
  config: Config;
  integrations: CodehostIntegrationService;
  webhooks: WebhookService;
}

const HOST_ERRORS = errorResponses(400, 401, 403, 404, 422, 502, 503);

/** An integration's own resource: connect, list, read, change, remove. */
const integrationRoutes: FastifyPluginAsyncTypebox<CodehostRouteDeps> = async (app, { config, integrations }) => {
  // Writes make the service connect to the integration's host: admin keys only (like OAuth provider
  // writes), and only to the hosts the operator allows.
  /** If-Match is checked against this: the integration as its GET shows it, read in the write's transaction. */
  const current = async (request: FastifyRequest, tx: Db) =>
    integrationResponse(
      await integrations.get(workspaceOf(request), (request.params as { integration_id: string }).integration_id, tx),
    );
  const policy = { allowedApiUrls: config.codehostAllowedUrls };
  const webhookUrl = (id: string): string => `${config.publicUrl}${BASE}/${id}/webhooks`;
  const integrationResponse = (row: CodehostIntegrationRow): Static<typeof Integration> => ({
    id: row.id,
    name: row.name,
    kind: row.kind,
    api_url: row.api_url,
    app_id: row.app_id,
    installation_id: row.installation_id,
    webhook_url: webhookUrl(row.id),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  });

  app.post(
    BASE,
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createCodehostIntegration',
        tags: ['codehost'],
        summary: 'Create a code-host integration',
        description:
          'Admin key. GitHub or GitHub Enterprise Server, with a token or a GitHub App installation; api_url must be under one of SLIPWAY_CODEHOST_ALLOWED_URLS (default https://api.github.com). The credentials are checked against the host before they are stored (400 codehost_rejected when the host refuses them). The webhook secret is returned once.',
        body: { ...CreateBody, examples: [{ name: 'github', token: 'github_pat_...' }] },
        response: { 201: CreatedIntegration, ...errorResponses(400, 401, 403, 409, 422, 502, 503) },
      },
    },
    async (request, reply) => {
      const { row, webhookSecret } = await integrations.create(workspaceOf(request), request.body, policy);
      return reply.status(201).send({ ...integrationResponse(row), webhook_secret: webhookSecret });
    },
  );

  app.get(
    BASE,
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listCodehostIntegrations',
        tags: ['codehost'],
        summary: 'List code-host integrations',
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(Integration, 'A page of integrations, newest first.'),
          ...errorResponses(401, 403, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await integrations.list(workspaceOf(request), limit, offset);
      return envelope(rows.map(integrationResponse), offset);
    },
  );

  app.get(
    `${BASE}/:integration_id`,
    {
      config: needs({ auth: 'workspace', etag: true }),
      schema: {
        operationId: 'getCodehostIntegration',
        tags: ['codehost'],
        summary: 'Get a code-host integration',
        params: Params,
        response: { 200: Integration, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => integrationResponse(await integrations.get(workspaceOf(request), request.params.integration_id)),
  );

  app.patch(
    `${BASE}/:integration_id`,
    {
      config: needs({ auth: 'workspace', admin: true, idempotent: true, etag: true, ifMatch: current }),
      schema: {
        operationId: 'patchCodehostIntegration',
        tags: ['codehost'],
        summary: 'Patch a code-host integration',
        description:
          'Admin key. Rename it, replace its credentials (a complete set: token, or app_id, private_key and installation_id; checked against the host) or its webhook secret (webhook_secret, or rotate_webhook_secret: true to generate one, returned once). api_url cannot change.',
        params: Params,
        body: PatchBody,
        response: { 200: UpdatedIntegration, ...errorResponses(400, 401, 403, 404, 409, 422, 502, 503) },
      },
    },
    async (request) => {
      const { row, webhookSecret } = await integrations.update(
        workspaceOf(request),
        request.params.integration_id,
        request.body,
        policy,
        { precondition: request.precondition },
      );
      return webhookSecret === null
        ? integrationResponse(row)
        : { ...integrationResponse(row), webhook_secret: webhookSecret };
    },
  );

  app.delete(
    `${BASE}/:integration_id`,
    {
      config: needs({ auth: 'workspace', admin: true, ifMatch: current }),
      schema: {
        operationId: 'deleteCodehostIntegration',
        tags: ['codehost'],
        summary: 'Delete a code-host integration',
        description: 'Admin key. 409 while codehost deployments use it.',
        params: Params,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 409, 422) },
      },
    },
    async (request, reply) => {
      await integrations.remove(workspaceOf(request), request.params.integration_id, {
        precondition: request.precondition,
      });
      return reply.status(204).send(null);
    },
  );
};

/** What an integration reaches and receives: its repositories and its webhook deliveries. */
const integrationReadRoutes: FastifyPluginAsyncTypebox<CodehostRouteDeps> = async (app, { integrations, webhooks }) => {
  app.get(
    `${BASE}/:integration_id/repos`,
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listCodehostRepositories',
        tags: ['codehost'],
        summary: 'List code-host repositories',
        description:
          "Every repository the integration reaches, over all pages of the host's listing. host_integration_id, url and default_branch feed the deployment create request.",
        params: Params,
        response: { 200: Type.Array(Repository), ...HOST_ERRORS },
      },
    },
    async (request) => integrations.listRepositories(workspaceOf(request), request.params.integration_id),
  );

  app.get(
    `${BASE}/:integration_id/deliveries`,
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listWebhookDeliveries',
        tags: ['codehost'],
        summary: 'List webhook deliveries of an integration',
        description: `Newest first, with what came of each: revision_created, ignored, duplicate or rejected, with a reason. The latest ${DELIVERIES_KEPT} deliveries and, apart from them, the latest ${REJECTED_DELIVERIES_KEPT} rejected ones are kept.`,
        params: Params,
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(Delivery, 'A page of deliveries, newest first.'),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await webhooks.listDeliveries(workspaceOf(request), request.params.integration_id, {
        limit,
        offset,
      });
      return envelope(rows.map(deliveryResponse), offset);
    },
  );

  await app.register(codehostWebhookRoutes, { webhooks });
};

export const codehostRoutes: FastifyPluginAsyncTypebox<CodehostRouteDeps> = async (app, opts) => {
  await integrationRoutes(app, opts);
  await integrationReadRoutes(app, opts);
};
