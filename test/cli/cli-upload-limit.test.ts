/**
 * `slipway deploy` of a folder that packs larger than the service takes is refused by the CLI before
 * anything is created or uploaded (issue 34, item 5: it made the deployment, uploaded for minutes and
 * left an empty deployment behind), saying the size and the limit in MiB, the limit's setting, the
 * largest files and how to leave files out. The CLI asks the service its limit (GET
 * /v2/uploads/limits). Run as a child process against a real service with a small limit.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { ADMIN_KEY } from '../helpers.ts';
import { startTestService, writeApp, type TestService } from '../dataplane/data-plane-harness.ts';
import { cliUser, type CliUser } from './cli-runner.ts';
import { test } from '../support/limited-test.ts';

const LIMIT = 1024 * 1024;
let service: TestService;
let user: CliUser;
before(async () => {
  service = await startTestService({ SLIPWAY_UPLOAD_LIMIT_BYTES: String(LIMIT) });
  user = await cliUser({ SLIPWAY_URL: service.base, SLIPWAY_API_KEY: ADMIN_KEY });
});
after(async () => {
  await user.remove();
  await service.close();
});

const PACKAGE = JSON.stringify({ name: 'agent', version: '1.0.0', scripts: { start: 'node server.js' } });

async function deploymentNames(): Promise<string[]> {
  const list = await service.api('GET', '/v2/deployments?limit=100');
  return (list.body.resources as { name: string }[]).map((d) => d.name);
}

test('the service tells its upload limit and the setting of it', async () => {
  const limits = await service.api('GET', '/v2/uploads/limits');
  assert.equal(limits.status, 200);
  assert.deepEqual(limits.body, { max_bytes: LIMIT, setting: 'SLIPWAY_UPLOAD_LIMIT_BYTES' });
});

test('a folder larger than the limit is refused before anything is created; left out with .slipwayignore, it deploys', async () => {
  // Random bytes do not compress: the tarball is about 2 MiB.
  const dir = await writeApp({ 'package.json': PACKAGE, 'server.js': '', 'slipway.json': '{}' });
  try {
    await fs.mkdir(path.join(dir, 'data'));
    await fs.writeFile(path.join(dir, 'data', 'model.bin'), randomBytes(2 * LIMIT));
    const refused = await user.run(['deploy', dir, '--name', 'too-big', '--no-wait']);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /packs to 2\.\d MiB, more than the 1\.0 MiB this service takes/);
    assert.match(refused.stderr, /SLIPWAY_UPLOAD_LIMIT_BYTES/);
    assert.match(refused.stderr, /data\/model\.bin \(2\.0 MiB\)/);
    assert.match(refused.stderr, /\.slipwayignore/);
    assert.match(refused.stderr, /Nothing was created or uploaded/);
    assert.doesNotMatch(refused.stderr, /Created deployment|\n\s+at /);
    assert.ok(!(await deploymentNames()).includes('too-big'), 'no deployment was created');
    const uploads = await service.database.db.selectFrom('source_uploads').select('id').execute();
    assert.equal(uploads.length, 0, 'nothing was uploaded');

    await fs.writeFile(path.join(dir, '.slipwayignore'), 'data/\n');
    const deployed = await user.run(['deploy', dir, '--name', 'too-big', '--no-wait']);
    assert.equal(deployed.code, 0, deployed.stderr);
    assert.ok((await deploymentNames()).includes('too-big'));
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
