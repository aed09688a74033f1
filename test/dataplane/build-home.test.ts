/**
 * A build's HOME is scratch (docs/app-config.md: "the build's `HOME` is not kept"): what the install and
 * build commands write there, npm's and pip's caches above all, is dropped when the build ends, so no
 * revision keeps a copy of it on disk, and no app sees it. What the build wrote into its source
 * directory is what the revision runs.
 *
 * The attacker's part: a build that leaves in its HOME a link to a directory of the host (and a
 * directory it made unreadable) has the link removed, never followed, and the revision still seals.
 *
 * What main did before: the build's HOME was sealed into the revision, copied off its disk image as
 * root, and kept for as long as the revision (49 to 119 MiB of npm cache for examples/langgraph-js).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import {
  deployApp,
  makeCanary,
  oneFileApp,
  requestApp,
  startTestService,
  type Canary,
  type TestService,
} from './data-plane-harness.ts';

const SERVER = `
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({
    built: fs.readFileSync('built.txt', 'utf8').trim(),
    cacheSeen: fs.existsSync(path.join(process.env.HOME, '.cache', 'tool', 'blob')),
  }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

let service: TestService;
let canary: Canary;
before(async () => {
  service = await startTestService();
  canary = await makeCanary(5);
});
after(async () => {
  await service?.close();
  await canary?.remove();
});

test("what a build writes in its HOME is not kept: the revision holds its source's output only, and a link there is never followed", async () => {
  // A cache of 8 MiB in HOME, a link to the host's canary, a directory made unreadable; the output in src.
  const install = [
    'mkdir -p "$HOME/.cache/tool" "$HOME/locked/inner"',
    'head -c 8388608 /dev/zero > "$HOME/.cache/tool/blob"',
    `ln -s ${canary.dir} "$HOME/host-link"`,
    'touch "$HOME/locked/inner/file" && chmod 000 "$HOME/locked"',
    'echo from-the-build > built.txt',
  ].join(' && ');
  const app = await deployApp(service, oneFileApp(SERVER, { install }), 'home-writer');

  const appDir = path.join(service.dataDir, 'revisions', app.revisionId, 'app');
  assert.deepEqual(await fs.readdir(path.join(appDir, 'home')), [], "the build's HOME is empty in the revision");
  assert.equal((await fs.readFile(path.join(appDir, 'src', 'built.txt'), 'utf8')).trim(), 'from-the-build');
  await canary.assertIntact('after the build');

  const answer = await requestApp(service, app.url, '/');
  assert.equal(answer.status, 200, answer.body);
  assert.deepEqual(JSON.parse(answer.body), { built: 'from-the-build', cacheSeen: false });
});
