/**
 * Uploads with several replicas (docs/data-plane.md, "Several replicas"): an upload received by an api
 * replica on another machine (its own data directory) is built and deployed by the worker, since the
 * upload's bytes are in the database. An upload made by an earlier version (a row without chunks, its
 * file in the data directory) still deploys where its file is, and fails with a clear reason elsewhere.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import * as tar from 'tar';
import { createSecretBox } from '../../src/crypto/secret-box.ts';
import {
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  writeApp,
  type TestService,
} from './data-plane-harness.ts';
import { buildReplicaApp, listen } from '../support/harness.ts';
import { test } from '../support/limited-test.ts';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/agent-app');

const TINY_APP = {
  'package.json': JSON.stringify({ name: 'tiny', private: true, type: 'module', scripts: { start: 'node server.js' } }),
  'server.js': `
import http from 'node:http';
http.createServer((req, res) => { res.writeHead(200); res.end(req.url === '/healthz' ? 'ok' : 'legacy upload'); })
  .listen(Number(process.env.PORT), process.env.HOST);
`,
  'slipway.json': JSON.stringify({ health_check_path: '/healthz', database: false }),
};

let service: TestService;
/** An api replica on "another machine": same database, its own data directory, no worker. */
let replica: FastifyInstance;
let replicaBase: string;
let replicaDataDir: string;

before(async () => {
  service = await startTestService();
  replicaDataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-replica-'));
  replica = await buildReplicaApp({
    config: { ...service.config, dataDir: replicaDataDir },
    database: service.database,
    secretBox: createSecretBox(randomBytes(32)),
  });
  replicaBase = await listen(replica);
});
after(async () => {
  await replica?.close();
  await service?.close();
  if (replicaDataDir) await fs.rm(replicaDataDir, { recursive: true, force: true });
});

async function createDeployment(name: string, tarballPath: string) {
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_config: {},
    source_revision_config: { source_tarball_path: tarballPath, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return created.body as { id: string; latest_revision_id: string };
}

/** What an earlier version left after an upload: the file in `dataDir`, and a row without chunks. */
async function legacyUpload(dataDir: string): Promise<string> {
  const id = randomUUID();
  const relative = `uploads/${id}.tar.gz`;
  await fs.mkdir(path.join(dataDir, 'uploads'), { recursive: true });
  const dir = await writeApp(TINY_APP);
  await tar.c({ gzip: true, file: path.join(dataDir, relative), cwd: dir, portable: true }, await fs.readdir(dir));
  const { size } = await fs.stat(path.join(dataDir, relative));
  const workspace = await service.database.db.selectFrom('workspaces').select('id').executeTakeFirstOrThrow();
  await service.database.db
    .insertInto('source_uploads')
    .values({ id, workspace_id: workspace.id, path: relative, size_bytes: size, sha256: 'earlier version' })
    .execute();
  return relative;
}

test('an upload received by an api replica with another data directory is deployed by the worker', async () => {
  const tarball = await uploadApp({ ...service, base: replicaBase }, EXAMPLE);
  const created = await createDeployment('from-another-replica', tarball);
  const revision = await waitForRevision(service, created.id, created.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));

  const deployment = (await service.api('GET', `/v2/deployments/${created.id}`)).body;
  const home = await requestApp(service, deployment.source_config.custom_url, '/');
  assert.equal(home.status, 200, home.body);
  for (const dataDir of [replicaDataDir, service.dataDir]) {
    const files = await fs.readdir(path.join(dataDir, 'uploads')).catch(() => [] as string[]);
    assert.deepEqual(files, [], `no upload file in ${dataDir}`);
  }
});

test('an upload made by an earlier version deploys from its file on the replica that received it', async () => {
  const tarball = await legacyUpload(service.dataDir);
  const created = await createDeployment('legacy-upload', tarball);
  const revision = await waitForRevision(service, created.id, created.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const deployment = (await service.api('GET', `/v2/deployments/${created.id}`)).body;
  const home = await requestApp(service, deployment.source_config.custom_url, '/');
  assert.equal(home.body, 'legacy upload');
});

test('an upload made by an earlier version on another replica fails with a reason that says so', async () => {
  const tarball = await legacyUpload(replicaDataDir);
  const created = await createDeployment('legacy-elsewhere', tarball);
  const revision = await waitForRevision(service, created.id, created.latest_revision_id);
  assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));
  assert.equal(revision.failure_reason, 'source_missing');
  assert.match(revision.failure_message, /another replica received it/);
});
