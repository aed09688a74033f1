/**
 * A deployment's host uid (migrations/019_app_uids.sql, src/store/app-uids.ts): one of the operator's
 * range, its own while it exists, the same after a restart (it is stored), never another's, even when
 * many deployments are given theirs at once; a full range is an error that says what to do.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { AppUidsExhaustedError, claimAppUid } from '../../src/store/app-uids.ts';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';

let t: TestDatabase;
let workspaceId: string;

before(async () => {
  t = await createTestDatabase();
  const org = randomUUID();
  workspaceId = randomUUID();
  await t.pool.query(`insert into organizations (id, name) values ($1, 'o')`, [org]);
  await t.pool.query(`insert into workspaces (id, organization_id, name) values ($1, $2, 'w')`, [workspaceId, org]);
});
after(() => t?.drop());

/** Stores a deployment row as the service does; its id. */
async function deployment(): Promise<string> {
  const id = randomUUID();
  const project = randomUUID();
  await t.pool.query(
    `with p as (insert into tracing_projects (id, workspace_id, name) values ($3, $2, $4) returning id)
     insert into deployments (id, workspace_id, name, source, source_config, deployment_type, status, tracing_project_id)
     select $1, $2, $5, 'external_container', '{}', 'dev', 'READY', p.id from p`,
    [id, workspaceId, project, `project-${project}`, `app-${id.slice(0, 8)}`],
  );
  return id;
}

test('each deployment gets a uid of the range of its own, and keeps it', async () => {
  const range = { first: 1_500_000_000, count: 100 };
  const [a, b] = [await deployment(), await deployment()];
  const uidA = await claimAppUid(t.db, a, range);
  const uidB = await claimAppUid(t.db, b, range);
  assert.notEqual(uidA, uidB);
  for (const uid of [uidA, uidB]) assert.ok(uid >= range.first && uid < range.first + range.count, String(uid));
  // Asked again (a restart, another replica): the stored one.
  assert.equal(await claimAppUid(t.db, a, range), uidA);
  assert.equal(await claimAppUid(t.db, b, { first: 1_600_000_000, count: 10 }), uidB);
});

// 200 at once: a claim that retried on a lost race gave up after ten losses (CI saw it at 24).
test('many deployments given uids at once never share one', async () => {
  const range = { first: 1_700_000_000, count: 1_000 };
  const ids = await Promise.all(Array.from({ length: 200 }, () => deployment()));
  const uids = await Promise.all(ids.map((id) => claimAppUid(t.db, id, range)));
  assert.equal(new Set(uids).size, ids.length, `shared: ${uids.join(' ')}`);
});

test("a deleted deployment's uid is free again; a full range is refused, naming the setting", async () => {
  const range = { first: 1_800_000_000, count: 2 };
  const [a, b, c] = [await deployment(), await deployment(), await deployment()];
  const uidA = await claimAppUid(t.db, a, range);
  await claimAppUid(t.db, b, range);
  await assert.rejects(claimAppUid(t.db, c, range), (error: unknown) => {
    assert.ok(error instanceof AppUidsExhaustedError);
    assert.match(error.message, /SLIPWAY_APP_UIDS \(1800000000-1800000001\)/);
    return true;
  });
  await t.pool.query('delete from deployments where id = $1', [a]);
  assert.equal(await claimAppUid(t.db, c, range), uidA);
});
