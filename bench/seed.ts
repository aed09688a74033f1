/**
 * Seeds the bench database. The service's own store and deployment service make the organization,
 * the workspaces, the keys and one real deployment per workspace (so every JSON column has exactly
 * the shape the service writes); bulk SQL then copies that deployment's row shapes N times in the same
 * schema, with what the service writes alongside each one: a tracing project, revision 1 (QUEUED, as no
 * data plane runs yet) as the latest revision, and three events.
 *
 * Data per workspace of size N:
 * - names `<team>-agent-<n>`, except about 40 spread over time that are `canary-<team>-<n>` (the
 *   `name_contains=canary` scenario finds two pages of them at every size);
 * - status READY 70%, UNUSED 15%, AWAITING_DATABASE 12%, UNKNOWN 3%; created one second apart;
 * - one deployment, `history`, with N revisions (the revisions scenario lists its newest page).
 * Two more workspaces of a fifth of the large size each hold other tenants' rows.
 */
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { newCredential } from '../src/auth/credentials.ts';
import type { SecretBox } from '../src/crypto/secret-box.ts';
import { createDeploymentService } from '../src/service/deployments.ts';
import type { Database } from '../src/store/schema.ts';
import { createApiKey, createOrganization, createWorkspace } from '../src/store/tenancy.ts';

export interface MeasuredWorkspace {
  size: number;
  workspaceId: string;
  /** A member key of this workspace. */
  apiKey: string;
  /** The deployment with `size` revisions. */
  historyDeploymentId: string;
  /** Deployments the get scenario cycles through. */
  getIds: string[];
  /** Deployments the patch scenario cycles through; each one's latest revision is QUEUED. */
  patchIds: string[];
}

export interface BenchFixture {
  measured: MeasuredWorkspace[];
  totals: { workspaces: number; deployments: number; revisions: number; events: number };
}

const TEAMS = ['billing', 'search', 'support', 'triage', 'intake', 'router', 'review', 'ledger'];
const CANARIES_PER_WORKSPACE = 40;
const GET_SAMPLE = 10_000;
const PATCH_TARGETS = 1_000;

/** N deployments shaped like `templateId`, each with its tracing project, revision 1 and events. */
async function bulkDeployments(
  client: pg.PoolClient,
  workspaceId: string,
  templateId: string,
  count: number,
): Promise<void> {
  const canaryEvery = Math.max(1, Math.floor(count / CANARIES_PER_WORKSPACE));
  await client.query('begin');
  try {
    await client.query(
      `create temp table bench_seed on commit drop as
       select n,
              gen_random_uuid() as id,
              gen_random_uuid() as revision_id,
              gen_random_uuid() as tracing_project_id,
              case when n % $2::int = 0 then format('canary-%s-%s', ($3::text[])[1 + n % 8], n)
                   else format('%s-agent-%s', ($3::text[])[1 + n % 8], n) end as name,
              case when n % 100 < 70 then 'READY' when n % 100 < 85 then 'UNUSED'
                   when n % 100 < 97 then 'AWAITING_DATABASE' else 'UNKNOWN' end as status,
              format('1.%s.0', n % 50) as version,
              now() - interval '1 day' - ($1::int - n) * interval '1 second' as created_at
       from generate_series(1, $1::int) as n`,
      [count, canaryEvery, TEAMS],
    );
    await client.query(
      `insert into tracing_projects (id, workspace_id, name, created_at) select tracing_project_id, $1, name, created_at from bench_seed`,
      [workspaceId],
    );
    await client.query(
      `insert into deployments (id, workspace_id, name, source, source_config, deployment_type, listener_id, status, secrets,
                                secret_references, image_version, tracing_project_id, latest_revision_id, created_at, updated_at)
       select s.id, $1, s.name, t.source, t.source_config, t.deployment_type, null, s.status, t.secrets,
              t.secret_references, s.version, s.tracing_project_id, s.revision_id, s.created_at, s.created_at
       from bench_seed s cross join deployments t where t.id = $2`,
      [workspaceId, templateId],
    );
    await client.query(
      `insert into revisions (id, deployment_id, workspace_id, number, status, source, source_revision_config, snapshot, secrets,
                              status_changed_at, created_at, updated_at)
       select s.revision_id, s.id, $1, 1, 'QUEUED', r.source,
              jsonb_set(r.source_revision_config, '{image_uri}', to_jsonb(format('registry.example.com/agents/%s:%s', s.name, s.version))),
              r.snapshot, r.secrets, s.created_at, s.created_at, s.created_at
       from bench_seed s cross join deployments t join revisions r on r.id = t.latest_revision_id where t.id = $2`,
      [workspaceId, templateId],
    );
    await client.query(
      `insert into events (workspace_id, subject_type, subject_id, deployment_id, type, from_status, to_status, data, created_at)
       select $1::uuid, 'deployment', s.id, s.id, 'deployment.created', null, 'AWAITING_DATABASE',
              jsonb_build_object('source', 'internal_container', 'tracing_project_id', s.tracing_project_id), s.created_at from bench_seed s
       union all
       select $1::uuid, 'revision', s.revision_id, s.id, 'revision.created', null, 'CREATING', '{"cause": "create"}'::jsonb, s.created_at from bench_seed s
       union all
       select $1::uuid, 'revision', s.revision_id, s.id, 'revision.status_changed', 'CREATING', 'QUEUED', '{}'::jsonb, s.created_at from bench_seed s`,
      [workspaceId],
    );
    await client.query('commit');
  } catch (error) {
    await client.query('rollback');
    throw error;
  }
}

/** Gives a deployment `count` revisions in all: older ones SKIPPED or DEPLOYED, the newest QUEUED. */
async function bulkRevisions(client: pg.PoolClient, deploymentId: string, count: number): Promise<void> {
  await client.query('begin');
  try {
    await client.query(
      `update revisions set status = 'SKIPPED', created_at = now() - ($2::int + 1000) * interval '1 millisecond',
              updated_at = now() - ($2::int + 1000) * interval '1 millisecond'
       where deployment_id = $1 and number = 1`,
      [deploymentId, count],
    );
    await client.query(
      `insert into revisions (id, deployment_id, workspace_id, number, status, source, source_revision_config, snapshot, secrets,
                              status_changed_at, created_at, updated_at)
       select gen_random_uuid(), r.deployment_id, r.workspace_id, n,
              case when n = $2::int then 'QUEUED' when n % 10 = 0 then 'DEPLOYED' else 'SKIPPED' end, r.source,
              jsonb_set(r.source_revision_config, '{image_uri}', to_jsonb(format('registry.example.com/agents/history:1.0.%s', n))),
              r.snapshot, r.secrets,
              r.created_at + n * interval '1 millisecond', r.created_at + n * interval '1 millisecond', r.created_at + n * interval '1 millisecond'
       from revisions r cross join generate_series(2, $2::int) as n
       where r.deployment_id = $1 and r.number = 1`,
      [deploymentId, count],
    );
    await client.query(
      `update deployments set latest_revision_id = (select id from revisions where deployment_id = $1 and number = $2::int),
              image_version = '1.0.' || $2::int
       where id = $1`,
      [deploymentId, count],
    );
    await client.query('commit');
  } catch (error) {
    await client.query('rollback');
    throw error;
  }
}

const templateInput = (name: string) => ({
  name,
  source: 'internal_container' as const,
  source_config: {
    deployment_type: 'prod' as const,
    resource_spec: { min_scale: 1, max_scale: 3, cpu: 0.5, memory_mb: 512 },
  },
  source_revision_config: { image_uri: `registry.example.com/agents/${name}:1.0.0` },
  secrets: [
    { name: 'OPENAI_API_KEY', value: 'sk-bench-not-a-real-key' },
    { name: 'DATABASE_URL', value: 'postgres://agent@db.internal/agent' },
  ],
});

async function ids(pool: pg.Pool, sql: string, params: unknown[]): Promise<string[]> {
  return (await pool.query<{ id: string }>(sql, params)).rows.map((r) => r.id);
}

export async function seed(
  db: Kysely<Database>,
  pool: pg.Pool,
  secretBox: SecretBox,
  sizes: number[],
  progress: (line: string) => void,
): Promise<BenchFixture> {
  const service = createDeploymentService({ db, secretBox });
  const organization = await createOrganization(db, `bench-${randomBytes(3).toString('hex')}`);
  const otherSize = Math.max(100, Math.floor(sizes[sizes.length - 1]! / 5));
  const plans = [
    ...sizes.map((size) => ({ name: `measured-${size}`, size, measured: true })),
    { name: 'other-tenant-a', size: otherSize, measured: false },
    { name: 'other-tenant-b', size: otherSize, measured: false },
  ];
  const measured: MeasuredWorkspace[] = [];
  const client = await pool.connect();
  try {
    for (const plan of plans) {
      const started = Date.now();
      const workspace = await createWorkspace(db, organization.id, plan.name);
      const template = await service.create(workspace.id, templateInput('template'));
      await bulkDeployments(client, workspace.id, template.id, plan.size);
      const history = await service.create(workspace.id, templateInput('history'));
      await bulkRevisions(client, history.id, plan.size);
      progress(
        `seeded ${plan.name}: ${plan.size} deployments, one with ${plan.size} revisions (${((Date.now() - started) / 1000).toFixed(1)} s)`,
      );
      if (!plan.measured) continue;
      const { value: apiKey, hash: apiKeyHash, prefix: apiKeyPrefix } = newCredential('apiKey');
      await createApiKey(db, {
        organizationId: organization.id,
        workspaceId: workspace.id,
        name: 'bench',
        role: 'member',
        hash: apiKeyHash,
        prefix: apiKeyPrefix,
      });
      measured.push({
        size: plan.size,
        workspaceId: workspace.id,
        apiKey,
        historyDeploymentId: history.id,
        getIds: await ids(
          pool,
          `select id from deployments where workspace_id = $1 and name like '%-agent-%' order by random() limit $2`,
          [workspace.id, GET_SAMPLE],
        ),
        patchIds: await ids(
          pool,
          `select id from deployments where workspace_id = $1 and name like '%-agent-%' order by random() limit $2`,
          [workspace.id, Math.min(PATCH_TARGETS, Math.floor(plan.size / 2))],
        ),
      });
    }
  } finally {
    client.release();
  }
  // A settled database, as autovacuum leaves it: statistics for the planner, visibility map set.
  await pool.query('vacuum (analyze)');
  const count = async (table: string) =>
    Number((await pool.query<{ n: string }>(`select count(*) as n from ${table}`)).rows[0]!.n);
  return {
    measured,
    totals: {
      workspaces: plans.length,
      deployments: await count('deployments'),
      revisions: await count('revisions'),
      events: await count('events'),
    },
  };
}
