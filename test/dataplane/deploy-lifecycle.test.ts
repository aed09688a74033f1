/**
 * The local data plane end to end, as a user sees it: upload the example agent app, create a
 * deployment, follow it to DEPLOYED, call the app at its stable URL (its secret, its own database),
 * change a secret under a steady stream of requests (no request fails during the switch), roll back,
 * and delete (processes, database and files gone).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { databaseUrl, quietClient, withClient } from '../../src/db/admin-client.ts';
import { REPLACED_CHANNEL } from '../../src/dataplane/app-replaced.ts';
import {
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/agent-app');

let service: TestService;
before(async () => {
  service = await startTestService();
});
after(async () => {
  await service.close();
});

test('the example app is built, deployed, served at its stable URL, updated without a failed request, rolled back and deleted', async () => {
  const tarball = await uploadApp(service, EXAMPLE);
  const created = await service.api('POST', '/v2/deployments', {
    name: 'support-agent',
    source: 'internal_source',
    source_config: {},
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    // Tokens 300 ms apart (over slipway.json's 50): a client that a busy host holds up for a moment still
    // sees them arrive one after another, while a buffering proxy would hand over all at the end.
    secrets: [
      { name: 'GREETING', value: 'hello-from-secret' },
      { name: 'STREAM_INTERVAL_MS', value: '300' },
    ],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deploymentId = created.body.id;
  assert.equal(created.body.status, 'AWAITING_DATABASE');
  const first = await waitForRevision(service, deploymentId, created.body.latest_revision_id);
  assert.equal(first.status, 'DEPLOYED', JSON.stringify(first));

  const deployment = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body;
  assert.equal(deployment.status, 'READY');
  assert.equal(deployment.active_revision_id, first.id);
  const url: string = deployment.source_config.custom_url;
  assert.match(url, /^http:\/\/support-agent-[0-9a-f]{8}\.localhost:\d+$/);

  // The app reads its secret and the platform's variables.
  const home = await requestApp(service, url, '/');
  assert.equal(home.status, 200, home.body);
  const info = JSON.parse(home.body);
  assert.equal(info.greeting, 'hello-from-secret');
  assert.equal(info.revision_id, first.id);

  // It writes to and reads from its own database.
  const note = await requestApp(service, url, '/notes', {
    method: 'POST',
    body: JSON.stringify({ text: 'remember the milk' }),
  });
  assert.ok(note.status === 200 || note.status === 201, note.body);
  const notes = await requestApp(service, url, '/notes');
  assert.match(notes.body, /remember the milk/);

  // Streaming passes through the proxy as it is produced: several token events, each its own chunk.
  const chunks: { at: number; text: string }[] = [];
  await new Promise<void>((resolve, reject) => {
    const request = http.get(
      { host: '127.0.0.1', port: service.edge.port, path: '/stream', headers: { host: new URL(url).host } },
      (response) => {
        response.setEncoding('utf8');
        response.on('data', (text: string) => chunks.push({ at: Date.now(), text }));
        response.on('end', resolve);
        response.on('error', reject);
      },
    );
    request.on('error', reject);
  });
  assert.match(chunks.map((c) => c.text).join(''), /event: done/);
  // What a user sees of a stream: the first token well before the end, not the whole answer at once.
  const firstToken = chunks.findIndex((c) => c.text.includes('event: token'));
  const done = chunks.findIndex((c) => c.text.includes('event: done'));
  assert.ok(
    firstToken !== -1 && firstToken < done,
    `the first token came with the end of the stream: ${chunks.length} chunk(s)`,
  );
  assert.ok(
    chunks[done]!.at - chunks[firstToken]!.at >= 500,
    `the tokens arrived spread over time, not buffered (${chunks[done]!.at - chunks[firstToken]!.at} ms)`,
  );

  // Its agent credential and SLIPWAY_API_URL reach this service: the credential is accepted (the
  // connection asked for does not exist: 404, not 401).
  const token = JSON.parse(
    (await requestApp(service, url, `/token?agent_id=support-agent&connection_id=${randomUUID()}`)).body,
  );
  assert.equal(token.got_token, false);
  assert.equal(token.slipway_status, 404, JSON.stringify(token));

  // The app has an origin of its own: the edge's port, never the API's (which knows no app, by host or path).
  assert.equal(Number(new URL(url).port), service.edge.port);
  assert.notEqual(service.edge.port, service.port);
  const slug = new URL(url).hostname.split('.')[0];
  const onApiPort = await requestApp(service, `http://${new URL(url).hostname}:${service.port}`, '/');
  assert.doesNotMatch(onApiPort.body, /hello-from-secret/, 'the API port answered as the app');
  const byPath = await fetch(`${service.base}/apps/${slug}/`);
  assert.doesNotMatch(await byPath.text(), /hello-from-secret/, 'the API port serves the app by path');

  // Build output and app output are kept as logs; the secret value never appears in them.
  const buildLog = await revisionLog(service, deploymentId, first.id, 'build');
  assert.ok(
    buildLog.some((line) => /Build finished/.test(line)),
    buildLog.join('\n'),
  );
  const deployLog = await eventually('app output in the deploy log', async () => {
    const lines = await revisionLog(service, deploymentId, first.id, 'deploy');
    return lines.some((line) => /Health check passed/.test(line)) ? lines : null;
  });
  assert.ok(!buildLog.concat(deployLog).some((line) => line.includes('hello-from-secret')));

  // A replaced revision is told so on the deployment's database, for its instances to take no more work
  // (the LangGraph server's queue: test/langgraph/launcher-postgres.test.ts).
  const { database_name: appDatabase } = await service.database.db
    .selectFrom('deployment_runtimes')
    .select('database_name')
    .where('deployment_id', '=', deploymentId)
    .executeTakeFirstOrThrow();
  const listener = quietClient(new pg.Client({ connectionString: databaseUrl(service.database.url, appDatabase!) }));
  await listener.connect();
  const told: string[] = [];
  listener.on('notification', (message) => {
    if (message.channel === REPLACED_CHANNEL) told.push(message.payload ?? '');
  });
  await listener.query(`listen ${REPLACED_CHANNEL}`);

  // A secrets change makes a new revision; a steady stream of requests sees no failure across the switch.
  let failures = 0;
  const seenFailures: string[] = [];
  let served = 0;
  let keepGoing = true;
  const load = Array.from({ length: 4 }, async () => {
    for (let i = 0; i < 5000 && keepGoing; i++) {
      const answer = await requestApp(service, url, '/').catch((error: Error) => ({ status: 0, body: String(error) }));
      if (answer.status === 200) served++;
      else {
        failures++;
        seenFailures.push(`${answer.status} ${answer.body}`);
      }
    }
  });
  const patched = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
    secrets: [{ name: 'GREETING', value: 'bye-from-secret' }],
  });
  assert.equal(patched.status, 200);
  const second = await waitForRevision(service, deploymentId, patched.body.latest_revision_id);
  assert.equal(second.status, 'DEPLOYED', JSON.stringify(second));
  await new Promise((resolve) => setTimeout(resolve, 300));
  keepGoing = false;
  await Promise.all(load);
  assert.equal(
    failures,
    0,
    `${failures} of ${served + failures} requests failed during the switch: ${seenFailures.slice(0, 5).join('; ')}`,
  );
  assert.ok(served > 0);
  assert.equal(JSON.parse((await requestApp(service, url, '/')).body).greeting, 'bye-from-secret');
  // The old revision's processes were drained and stopped; its data stays in the database.
  assert.match((await requestApp(service, url, '/notes')).body, /remember the milk/);
  await eventually('the first revision to be told it was replaced', () => told.length > 0);
  assert.deepEqual(told, [first.id], 'the replaced revision is named, once');

  // Roll back: redeploy revision 1, which runs its own secrets again.
  const rolled = await service.api('POST', `/v2/deployments/${deploymentId}/revisions/${first.id}/redeploy`);
  assert.equal(rolled.status, 201, JSON.stringify(rolled.body));
  const third = await waitForRevision(service, deploymentId, rolled.body.latest_revision_id);
  assert.equal(third.status, 'DEPLOYED', JSON.stringify(third));
  assert.equal(JSON.parse((await requestApp(service, url, '/')).body).greeting, 'hello-from-secret');
  await eventually('the second revision to be told it was replaced', () => told.length > 1);
  assert.deepEqual(told, [first.id, second.id], 'never the revision that serves');
  await listener.end();
  // Its build output was still there: copied, not built again.
  assert.ok(
    (await revisionLog(service, deploymentId, third.id, 'build')).some((line) =>
      line.includes(`Reusing the build output of revision ${first.id}`),
    ),
  );

  // Delete: AWAITING_DELETE, then gone, with its processes, database and files.
  const runtime = await service.database.db
    .selectFrom('deployment_runtimes')
    .selectAll()
    .where('deployment_id', '=', deploymentId)
    .executeTakeFirstOrThrow();
  assert.ok(runtime.database_name);
  const removed = await service.api('DELETE', `/v2/deployments/${deploymentId}`);
  assert.equal(removed.status, 204);
  await eventually(
    'the deployment to disappear',
    async () => (await service.api('GET', `/v2/deployments/${deploymentId}`)).status === 404,
  );
  assert.equal((await requestApp(service, url, '/')).status, 404);
  const databases = await withClient(service.database.url, (c) =>
    c.query('select 1 from pg_database where datname = $1', [runtime.database_name]),
  );
  assert.equal(databases.rowCount, 0, 'the app database is dropped');
  const left = await fs.readdir(path.join(service.dataDir, 'revisions')).catch(() => []);
  assert.deepEqual(left, [], 'no app directory is left');
  const uploads = await service.database.pool.query(
    'select (select count(*)::int from source_uploads) as rows, (select count(*)::int from upload_chunks) as chunks',
  );
  assert.deepEqual(uploads.rows[0], { rows: 0, chunks: 0 }, 'the upload only this deployment used is removed');
});
