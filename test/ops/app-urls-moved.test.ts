/**
 * A service started on another apps port or domain than the one its deployments were deployed on (a
 * restore on another machine, say: docs/operations.md, "Backup and restore") shows each deployment's
 * stable URL (`source_config.custom_url`) on the app edge it runs now, not the old one (issue 34,
 * item 6): the data plane moves them when it starts. A listener's deployment keeps its own URL.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { startTestService, type TestService } from '../dataplane/data-plane-harness.ts';
import { appUrl } from '../../src/dataplane/app-edge.ts';
import { sql } from 'kysely';
import { test } from '../support/limited-test.ts';

let service: TestService;
before(async () => {
  service = await startTestService();
});
after(() => service.close());

test("a stable URL of another apps port is moved to this edge's when the data plane starts", async () => {
  const created = await service.api('POST', '/v2/deployments', {
    name: 'moved-app',
    source: 'internal_source',
    source_config: {},
    source_revision_config: {},
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id as string;
  const { db } = service.database;
  const { app_slug: slug } = await db
    .selectFrom('deployments')
    .select('app_slug')
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  // As a restored row from a service whose apps were on port 9 shows it.
  const old = `http://${slug}.localhost:9`;
  await db
    .updateTable('deployments')
    .set({ source_config: sql`jsonb_set(source_config, '{custom_url}', to_jsonb(${old}::text))` })
    .where('id', '=', id)
    .execute();
  assert.equal((await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url, old);

  await service.stopWorker();
  await service.startWorker();
  const shown = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  assert.equal(shown, appUrl(service.edge, slug));
  assert.notEqual(shown, old);
  assert.match(shown, new RegExp(`^http://${slug}\\.localhost:${new URL(service.edge.publicUrl).port}$`));
});
