/**
 * An app started by its package.json start script (the default for a Node app, or `npm start` written
 * out) runs that script directly: no npm process stays between the instance's sandbox and the app (it
 * was a Node.js process of about 55 MB per instance), and the stop's SIGTERM reaches the app's own
 * handler.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
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

/** Answers with the command lines of its ancestors; on SIGTERM leaves a file in its data directory and exits. */
const SERVER = `
import fs from 'node:fs';
import http from 'node:http';
const ancestors = () => {
  const found = [];
  let pid = process.ppid;
  while (pid > 1 && String(pid) !== process.env.STOP_AT) {
    const cmdline = fs.readFileSync('/proc/' + pid + '/cmdline', 'utf8').split('\\0').join(' ').trim();
    found.push(cmdline);
    pid = Number(fs.readFileSync('/proc/' + pid + '/stat', 'utf8').split(') ')[1].split(' ')[1]);
  }
  return found;
};
process.on('SIGTERM', () => {
  fs.writeFileSync(process.env.SLIPWAY_DATA_DIR + '/sigterm-' + process.env.SLIPWAY_REVISION_ID, 'handled');
  process.exit(0);
});
http.createServer((req, res) => res.end(JSON.stringify({ ancestors: ancestors() })))
  .listen(Number(process.env.PORT), process.env.HOST);
`;

let service: TestService;
before(async () => {
  service = await startTestService();
});
after(async () => {
  await service.close();
});

for (const [name, slipwayJson] of [
  ['the default start script', { database: false }],
  ['npm start written out', { database: false, start: 'npm start' }],
] as const) {
  test(`${name}: the app runs without npm, and its SIGTERM handler runs on stop`, async () => {
    const tarball = await uploadApp(service, {
      'package.json': JSON.stringify({ name: 'direct', type: 'module', scripts: { start: 'node server.js' } }),
      'server.js': SERVER,
      'slipway.json': JSON.stringify(slipwayJson),
    });
    const created = await service.api('POST', '/v2/deployments', {
      name: `direct-${slipwayJson.start ? 'npm' : 'default'}`,
      source: 'internal_source',
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
      // Without a sandbox the walk up would reach the test's own processes: it stops at this one.
      secrets: [{ name: 'STOP_AT', value: String(process.pid) }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const first = created.body.latest_revision_id as string;
    const revision = await waitForRevision(service, id, first);
    assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    const url = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
    const answer = await requestApp(service, url, '/');
    assert.equal(answer.status, 200, answer.body);
    const { ancestors } = JSON.parse(answer.body) as { ancestors: string[] };
    assert.ok(ancestors.length > 0, answer.body);
    assert.ok(
      !ancestors.some((cmdline) => /\bnpm\b/.test(cmdline)),
      `npm between the sandbox and the app: ${answer.body}`,
    );

    // A new revision replaces the instance: the old one is stopped, and its handler sees the SIGTERM.
    const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const second = await waitForRevision(service, id, patched.body.latest_revision_id);
    assert.equal(second.status, 'DEPLOYED', JSON.stringify(second));
    const marker = path.join(service.dataDir, 'deployments', id, 'data', `sigterm-${first}`);
    await eventually(`the SIGTERM handler of revision ${first}`, () =>
      fs.readFile(marker, 'utf8').then(
        (text) => text === 'handled',
        () => false,
      ),
    ).catch(async (error) => {
      const log = await revisionLog(service, id, first, 'deploy');
      throw new Error(`${String(error)}; ${JSON.stringify(await fs.readdir(path.dirname(marker)))}; ${log.join('\n')}`);
    });
  });
}
