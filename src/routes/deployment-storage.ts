/** How much space a deployment's own database takes, and its LangGraph state (docs/langgraph.md). */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { needs } from '../http/route-needs.ts';
import { DateTime, Nullable, Uuid, errorResponses } from '../http/schema-helpers.ts';
import type { DeploymentStorageService } from '../service/deployment-storage.ts';

const Bytes = (description: string) => Type.Integer({ minimum: 0, description });

const TableUsage = Type.Object(
  {
    name: Type.String({ description: 'e.g. threads, runs, run_events, checkpoints, checkpoint_writes, store' }),
    rows: Type.Integer({ minimum: 0 }),
    rows_estimated: Type.Boolean({
      description: "True when counting took too long and rows is PostgreSQL's estimate.",
    }),
    size_bytes: Bytes('The table with its indexes and TOAST.'),
  },
  { title: 'StateTableUsage' },
);

const LangGraphTtl = Type.Object(
  {
    checkpointer: Nullable(
      Type.Object({
        strategy: Type.Literal('delete'),
        default_ttl: Type.Number({ description: 'Minutes a thread may stay idle before it is deleted.' }),
        sweep_interval_minutes: Type.Number(),
      }),
    ),
    store: Nullable(
      Type.Object({
        default_ttl: Type.Number({ description: 'Minutes after which a store item expires.' }),
        refresh_on_read: Type.Boolean(),
        sweep_interval_minutes: Type.Number(),
      }),
    ),
    recorded_at: DateTime({ description: 'When the last instance to start recorded them.' }),
  },
  { title: 'LangGraphTtl' },
);

const DeploymentStorage = Type.Object(
  {
    deployment_id: Uuid(),
    database: Nullable(
      Type.Object(
        { name: Type.String(), size_bytes: Bytes('pg_database_size of the database.') },
        {
          description:
            'Null when the deployment has no database on this service (a listener runs it, or it wants none).',
        },
      ),
    ),
    langgraph: Nullable(
      Type.Object(
        {
          size_bytes: Bytes('All the tables of the schema langgraph.'),
          tables: Type.Array(TableUsage),
          ttl: Nullable(LangGraphTtl),
        },
        { description: 'Null when the database holds no LangGraph state. ttl is null when no instance recorded it.' },
      ),
    ),
    measured_at: DateTime(),
  },
  { title: 'DeploymentStorage' },
);

export const deploymentStorageRoutes: FastifyPluginAsyncTypebox<{ storage: DeploymentStorageService }> = async (
  app,
  { storage },
) => {
  app.get(
    '/v2/deployments/:deployment_id/storage',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'getDeploymentStorage',
        tags: ['deployments'],
        summary: "How much space the deployment's database takes",
        description:
          "The size of the deployment's own PostgreSQL database and, for a LangGraph deployment, the rows and " +
          'bytes of each table of its state (threads, runs, checkpoints, the store...) and the TTLs in force. ' +
          'Measured when asked; 503 while its instances hold every connection its database role may have.',
        params: Type.Object({ deployment_id: Uuid() }),
        response: { 200: DeploymentStorage, ...errorResponses(401, 403, 404, 422, 503) },
      },
    },
    async (request) => storage.measure(workspaceOf(request), request.params.deployment_id),
  );
};
