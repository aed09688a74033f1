/** The small tag model behind the tag_value_ids filter: keys, values, and the values a deployment carries. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import type { TagService } from '../service/tags.ts';
import { needs } from '../http/route-needs.ts';

const TagValue = Type.Object(
  { id: Uuid(), tag_key_id: Uuid(), value: Type.String(), created_at: DateTime() },
  { title: 'TagValue' },
);
const TagKey = Type.Object(
  { id: Uuid(), key: Type.String(), description: Nullable(Type.String()), created_at: DateTime() },
  { title: 'TagKey' },
);
const DeploymentTag = Type.Object(
  { tag_key_id: Uuid(), key: Type.String(), tag_value_id: Uuid(), value: Type.String() },
  { title: 'DeploymentTag' },
);
const DeploymentTagList = ListEnvelope(DeploymentTag, 'A page of the tag values of a deployment.');
const KeyParams = Type.Object({ tag_key_id: Uuid() });
/** The most tag values a deployment carries: a PUT answers with the whole set in one page. */
const MAX_DEPLOYMENT_TAGS = 100;
const TAG_TEXT = { minLength: 1, maxLength: 128, pattern: '^\\S(.*\\S)?$' };

const keyResponse = (k: { id: string; key: string; description: string | null; created_at: Date }) => ({
  ...k,
  created_at: k.created_at.toISOString(),
});
const valueResponse = (v: { id: string; tag_key_id: string; value: string; created_at: Date }) => ({
  ...v,
  created_at: v.created_at.toISOString(),
});

/** Tag keys: create, list, delete. */
const tagKeyRoutes: FastifyPluginAsyncTypebox<{ tags: TagService }> = async (app, { tags }) => {
  app.post(
    '/v2/tags/keys',
    {
      config: needs({ auth: 'workspace', idempotent: true, etag: true }),
      schema: {
        operationId: 'createTagKey',
        tags: ['tags'],
        summary: 'Create a tag key',
        body: Type.Object(
          { key: Type.String(TAG_TEXT), description: Type.Optional(Nullable(Type.String({ maxLength: 1024 }))) },
          { title: 'TagKeyCreate' },
        ),
        response: { 201: TagKey, ...errorResponses(401, 403, 409, 422) },
      },
    },
    async (request, reply) => {
      const row = await tags.createKey(workspaceOf(request), request.body);
      return reply.status(201).send(keyResponse(row));
    },
  );

  app.get(
    '/v2/tags/keys',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listTagKeys',
        tags: ['tags'],
        summary: 'List tag keys',
        querystring: Type.Object(PageQuery),
        response: { 200: ListEnvelope(TagKey, 'A page of tag keys.'), ...errorResponses(401, 403, 422) },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await tags.listKeys(workspaceOf(request), { limit, offset });
      return envelope(rows.map(keyResponse), offset);
    },
  );

  app.delete(
    '/v2/tags/keys/:tag_key_id',
    {
      config: needs({ auth: 'workspace', ifMatch: 'only-star' }),
      schema: {
        operationId: 'deleteTagKey',
        tags: ['tags'],
        summary: 'Delete a tag key and its values',
        params: KeyParams,
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await tags.removeKey(workspaceOf(request), request.params.tag_key_id);
      return reply.status(204).send(null);
    },
  );
};

/** A key's values: create, list, delete. */
const tagValueRoutes: FastifyPluginAsyncTypebox<{ tags: TagService }> = async (app, { tags }) => {
  app.post(
    '/v2/tags/keys/:tag_key_id/values',
    {
      config: needs({ auth: 'workspace', idempotent: true, etag: true }),
      schema: {
        operationId: 'createTagValue',
        tags: ['tags'],
        summary: 'Add a value to a tag key',
        params: KeyParams,
        body: Type.Object({ value: Type.String(TAG_TEXT) }, { title: 'TagValueCreate' }),
        response: { 201: TagValue, ...errorResponses(401, 403, 404, 409, 422) },
      },
    },
    async (request, reply) => {
      const row = await tags.addValue(workspaceOf(request), request.params.tag_key_id, request.body.value);
      return reply.status(201).send(valueResponse(row));
    },
  );

  app.get(
    '/v2/tags/keys/:tag_key_id/values',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listTagValues',
        tags: ['tags'],
        summary: 'List the values of a tag key',
        params: KeyParams,
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(TagValue, 'A page of the values of a tag key.'),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await tags.listValues(workspaceOf(request), request.params.tag_key_id, { limit, offset });
      return envelope(rows.map(valueResponse), offset);
    },
  );

  app.delete(
    '/v2/tags/keys/:tag_key_id/values/:tag_value_id',
    {
      config: needs({ auth: 'workspace', ifMatch: 'only-star' }),
      schema: {
        operationId: 'deleteTagValue',
        tags: ['tags'],
        summary: 'Delete a tag value',
        params: Type.Object({ tag_key_id: Uuid(), tag_value_id: Uuid() }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await tags.removeValue(workspaceOf(request), request.params.tag_key_id, request.params.tag_value_id);
      return reply.status(204).send(null);
    },
  );
};

/** The tag values a deployment carries: set and list. */
const deploymentTagRoutes: FastifyPluginAsyncTypebox<{ tags: TagService }> = async (app, { tags }) => {
  const DeploymentParams = Type.Object({ deployment_id: Uuid() });
  app.put(
    '/v2/deployments/:deployment_id/tags',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'setDeploymentTags',
        tags: ['tags'],
        summary: 'Set the tag values of a deployment',
        description: 'Replaces the whole set.',
        params: DeploymentParams,
        body: Type.Object(
          { tag_value_ids: Type.Array(Uuid(), { maxItems: MAX_DEPLOYMENT_TAGS, uniqueItems: true }) },
          { title: 'DeploymentTagsSet' },
        ),
        response: { 200: DeploymentTagList, ...errorResponses(400, 401, 403, 404, 422) },
      },
    },
    async (request) => {
      // The whole new set in one page: the body holds at most MAX_DEPLOYMENT_TAGS ids.
      const rows = await tags.setDeploymentTags(
        workspaceOf(request),
        request.params.deployment_id,
        request.body.tag_value_ids,
        { limit: MAX_DEPLOYMENT_TAGS, offset: 0 },
      );
      return envelope(rows, 0);
    },
  );

  app.get(
    '/v2/deployments/:deployment_id/tags',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listDeploymentTags',
        tags: ['tags'],
        summary: 'List the tag values of a deployment',
        params: DeploymentParams,
        querystring: Type.Object(PageQuery),
        response: { 200: DeploymentTagList, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      return envelope(
        await tags.listDeploymentTags(workspaceOf(request), request.params.deployment_id, { limit, offset }),
        offset,
      );
    },
  );
};

export const tagRoutes: FastifyPluginAsyncTypebox<{ tags: TagService }> = async (app, opts) => {
  await tagKeyRoutes(app, opts);
  await tagValueRoutes(app, opts);
  await deploymentTagRoutes(app, opts);
};
