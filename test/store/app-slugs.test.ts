/**
 * Each deployment's app slug (the DNS label of its stable URL) is chosen by the database when the
 * deployment is stored and is unique across the service (migrations/017_app_slugs.sql). Before, the data
 * plane derived `<name>-<first 8 hex digits of the id>` each time it served an app, so two workspaces'
 * `agent` whose ids began with the same 32 bits shared one URL and the app served last took it.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { databaseUrl, withClient } from '../../src/db/admin-client.ts';
import { connect } from '../../src/db/database.ts';
import { migrate } from '../../src/db/migrate.ts';
import { slugFromHost } from '../../src/dataplane/app-urls.ts';
import { ADMIN_KEY, client, createTestApp, createTestDatabase, type TestApp } from '../support/harness.ts';

const ID = '0b9e41c7-5d2a-4f1e-9c3b-7a8e6d5f4c21';

/** An id that begins with the same 8 hex digits as `id` (another 32 bits would make it collide). */
function sameFirstDigits(id: string): string {
  const rest = randomUUID().slice(8);
  return `${id.slice(0, 8)}${rest}`;
}

/** Stores a deployment as the service does (one statement; the database chooses the slug) and gives its slug. */
async function insertDeployment(db: pg.ClientBase, row: { id: string; workspaceId: string; name: string }) {
  const project = randomUUID();
  const { rows } = await db.query<{ app_slug: string }>(
    `with p as (insert into tracing_projects (id, workspace_id, name) values ($4, $2, $5) returning id)
     insert into deployments (id, workspace_id, name, source, source_config, deployment_type, status, tracing_project_id)
     select $1, $2, $3, 'external_container', '{}', 'dev', 'READY', p.id from p returning app_slug`,
    [row.id, row.workspaceId, row.name, project, `project-${project}`],
  );
  return rows[0]!.app_slug;
}

describe('the slug format', () => {
  let t: Awaited<ReturnType<typeof createTestDatabase>>;
  before(async () => (t = await createTestDatabase()));
  after(() => t.drop());

  const slugOf = async (name: string, id: string, digits = 8) =>
    (await sql<{ s: string }>`select app_slug_of(${name}, ${id}::uuid, ${digits}) as s`.execute(t.db)).rows[0]!.s;

  test('the name plus the first 8 hex digits of the id, in lower case', async () => {
    assert.equal(await slugOf('support-agent', ID.toUpperCase()), 'support-agent-0b9e41c7');
    assert.equal(await slugOf('support-agent', ID, 16), 'support-agent-0b9e41c75d2a4f1e');
  });

  test('a long name is cut so the slug stays one DNS label (63 characters at most), never ending in a dash', async () => {
    assert.equal(await slugOf('a'.repeat(63), ID), `${'a'.repeat(54)}-0b9e41c7`);
    assert.equal(await slugOf('a'.repeat(63), ID, 16), `${'a'.repeat(46)}-0b9e41c75d2a4f1e`);
    assert.equal(await slugOf(`${'b'.repeat(53)}-cdef`, ID), `${'b'.repeat(53)}-0b9e41c7`);
    for (const digits of [8, 16]) {
      const slug = await slugOf(`${'c'.repeat(70)}`, ID, digits);
      assert.ok(slug.length <= 63, slug);
      assert.equal(slugFromHost(`${slug}.localhost`, 'localhost'), slug, 'the built-in edge reads it back');
    }
  });

  test('a name that is not a DNS label is folded into one', async () => {
    assert.equal(await slugOf('My Agent_v2', ID), 'my-agent-v2-0b9e41c7');
    assert.equal(await slugOf('--', ID), 'app-0b9e41c7');
  });
});

/** Another workspace of the test app's organization. */
async function otherWorkspace(app: TestApp): Promise<string> {
  const id = randomUUID();
  await app.database.pool.query('insert into workspaces (id, organization_id, name) values ($1, $2, $3)', [
    id,
    app.organizationId,
    `other-${randomBytes(3).toString('hex')}`,
  ]);
  return id;
}

describe('two deployments whose ids begin alike', () => {
  let app: TestApp;
  before(async () => (app = await createTestApp()));
  after(() => app.close());

  test("another workspace's deployment of the same name never gets the slug of one already stored", async () => {
    const api = client(app.app, ADMIN_KEY);
    const victim = await api.post('/v2/deployments', {
      name: 'agent',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/agent:1' },
    });
    assert.equal(victim.status, 201, JSON.stringify(victim.body));
    const conn = await app.database.pool.connect();
    try {
      const slug = await insertDeployment(conn, {
        id: sameFirstDigits(victim.body.id),
        workspaceId: await otherWorkspace(app),
        name: 'agent',
      });
      const victimSlug = (await conn.query('select app_slug from deployments where id = $1', [victim.body.id])).rows[0]
        .app_slug;
      assert.equal(victimSlug, `agent-${victim.body.id.slice(0, 8)}`, 'the first keeps the short form');
      assert.notEqual(slug, victimSlug);
      assert.match(slug, /^agent-[0-9a-f]{16}$/);
      assert.equal(slugFromHost(`${slug}.localhost:8125`, 'localhost'), slug);
    } finally {
      conn.release();
    }
  });

  test('two stored at the same time in two transactions both get their own slug (the second waits for the first)', async () => {
    const pool = app.database.pool;
    const workspaceId = app.workspaceId;
    const secondWorkspace = await otherWorkspace(app);
    const first = randomUUID();
    const a = await pool.connect();
    const b = await pool.connect();
    try {
      await a.query('begin');
      await b.query('begin');
      const slugA = await insertDeployment(a, { id: first, workspaceId, name: 'racer' });
      // B's insert waits for A's transaction; A commits while it waits.
      const slugB = insertDeployment(b, { id: sameFirstDigits(first), workspaceId: secondWorkspace, name: 'racer' });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await a.query('commit');
      const slugOfB = await slugB;
      await b.query('commit');
      assert.equal(slugA, `racer-${first.slice(0, 8)}`);
      assert.match(slugOfB, /^racer-[0-9a-f]{16}$/);
    } finally {
      await a.query('rollback').catch(() => undefined);
      await b.query('rollback').catch(() => undefined);
      a.release();
      b.release();
    }
  });
});

test('an upgrade gives existing deployments their slugs: the URLs they had, and the older of two that shared one keeps it', async () => {
  const adminUrl = process.env.SLIPWAY_TEST_ADMIN_URL;
  assert.ok(adminUrl, 'run with npm test');
  const name = `slipway_slugs_${randomBytes(4).toString('hex')}`;
  await withClient(adminUrl, (c) => c.query(`create database ${name}`));
  const { db, pool } = connect(databaseUrl(adminUrl, name), 2);
  try {
    await migrate(pool, { upTo: 16 });
    const org = randomUUID();
    const [ws1, ws2] = [randomUUID(), randomUUID()];
    await pool.query(`insert into organizations (id, name) values ($1, 'o')`, [org]);
    await pool.query(`insert into workspaces (id, organization_id, name) values ($1, $3, 'one'), ($2, $3, 'two')`, [
      ws1,
      ws2,
      org,
    ]);
    const older = randomUUID();
    const newer = sameFirstDigits(older);
    const alone = randomUUID();
    // As the service stored them before 017: no slug.
    const plain = async (id: string, workspaceId: string, name: string, createdAt: string) => {
      const project = randomUUID();
      await pool.query(`insert into tracing_projects (id, workspace_id, name) values ($1, $2, $3)`, [
        project,
        workspaceId,
        `p-${project}`,
      ]);
      await pool.query(
        `insert into deployments (id, workspace_id, name, source, source_config, deployment_type, status, tracing_project_id, created_at)
         values ($1, $2, $3, 'external_container', '{}', 'dev', 'READY', $4, $5)`,
        [id, workspaceId, name, project, createdAt],
      );
    };
    await plain(newer, ws2, 'agent', '2026-01-02T00:00:00Z');
    await plain(older, ws1, 'agent', '2026-01-01T00:00:00Z');
    await plain(alone, ws1, 'Other Agent', '2026-01-03T00:00:00Z');
    await migrate(pool);
    const slugs = new Map(
      (await pool.query<{ id: string; app_slug: string }>('select id, app_slug from deployments')).rows.map((r) => [
        r.id,
        r.app_slug,
      ]),
    );
    assert.equal(slugs.get(older), `agent-${older.slice(0, 8)}`, 'the older keeps its URL');
    assert.equal(slugs.get(newer), `agent-${newer.replace(/-/g, '').slice(0, 16)}`, 'the newer gets the long form');
    assert.equal(slugs.get(alone), `other-agent-${alone.slice(0, 8)}`, 'a deployment that shared none keeps its URL');
  } finally {
    await db.destroy();
    await withClient(adminUrl, (c) => c.query(`drop database if exists ${name} with (force)`));
  }
});
