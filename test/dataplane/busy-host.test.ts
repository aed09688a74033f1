/**
 * Apps on a busy host, as an operator meets it: ordinary processes that are not Slipway's (here `node`
 * spinning, one per CPU, at the priority any process has) keep every CPU busy while a tiny app, and then
 * the LangGraph example (an `npm ci` from the registry and LangGraph's server), are built and deployed
 * under the service's default deadlines. The apps' parent cgroup has a weight of its own, so the builds
 * and the apps get their share of each CPU and reach DEPLOYED.
 *
 * What the old code did: the apps' parent group was in the kernel's idle class (`cpu.idle`), which gets
 * only the cycles that every other process leaves; with a spinning process on each CPU that is next to
 * nothing, and the deploy ran into its health-check deadline (or the build into its own).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { keepCpusBusy } from '../support/busy-host.ts';
import {
  oneFileApp,
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { test } from '../support/limited-test.ts';
import { MAX_TEST_SECONDS } from '../support/wait.ts';

const SERVER = `
import http from 'node:http';
http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('served on a busy host');
}).listen(Number(process.env.PORT), process.env.HOST);
`;

/** A build step with some work of its own (a few tens of milliseconds of CPU on an idle machine). */
const BUILD = `node -e "let x = 0; for (let i = 0; i < 3e7; i++) x += i; console.log('built', x > 0)"`;

const LANGGRAPH_EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/langgraph-js');

let service: TestService;
before(async () => {
  // The service's own default health-check deadline (the harness shortens it).
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '60' });
});
after(async () => {
  await service?.close();
});

test('with every CPU kept busy by ordinary processes outside the service, a tiny app is built and DEPLOYED, and answers', async () => {
  const tarball = await uploadApp(
    service,
    oneFileApp(SERVER, { health_check_path: '/', database: false, build: BUILD }),
  );
  const busy = keepCpusBusy();
  try {
    const created = await service.api('POST', '/v2/deployments', {
      name: 'busy-host',
      source: 'internal_source',
      source_config: {},
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
    assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    const url: string = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url;
    const answer = await requestApp(service, url, '/');
    assert.equal(answer.status, 200, answer.body);
    assert.equal(answer.body, 'served on a busy host');
  } finally {
    await busy.stop();
  }
});

// An npm install starved of CPU may take longer than a test's usual limit: this one gets the most a test may.
test(
  'with every CPU kept busy by ordinary processes outside the service, the LangGraph example installs from the registry and is DEPLOYED',
  { timeout: 600_000 },
  async () => {
    // The example as the CLI packs it: without node_modules.
    const source = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-busy-langgraph-'));
    await fs.cp(LANGGRAPH_EXAMPLE, source, { recursive: true, filter: (from) => !from.includes('node_modules') });
    const tarball = await uploadApp(service, source).finally(() => fs.rm(source, { recursive: true, force: true }));
    const busy = keepCpusBusy();
    try {
      const created = await service.api('POST', '/v2/deployments', {
        name: 'busy-langgraph',
        source: 'internal_source',
        source_config: {},
        source_revision_config: { source_tarball_path: tarball, framework_config_path: 'langgraph.json' },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const revision = await waitForRevision(
        service,
        created.body.id,
        created.body.latest_revision_id,
        undefined,
        MAX_TEST_SECONDS - 30,
      );
      assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    } finally {
      await busy.stop();
    }
  },
);
