/**
 * Attacks by an app's own code (it runs in the sandbox) on the app edge that serves it and on the service:
 * HAProxy's runtime socket (`<data dir>/edge/admin.sock`, where one command re-routes every app), its
 * pid file and configuration, its process, and the API with the credential the app is given. The probe
 * app of test/dataplane/containment-apps.ts runs the attacks from inside.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { processAlive } from '../../src/db/embedded-postgres.ts';
import { probeApp } from '../dataplane/containment-apps.ts';
import {
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { test } from '../support/limited-test.ts';

let service: TestService;
let url: string;

async function call(pathname: string): Promise<any> {
  const answer = await requestApp(service, url, pathname);
  assert.equal(answer.status, 200, `${pathname}: ${answer.status} ${answer.body}`);
  return JSON.parse(answer.body);
}

const sh = async (cmd: string): Promise<string> =>
  ((await call(`/sh?cmd=${encodeURIComponent(cmd)}`)) as { output: string }).output;

before(async () => {
  service = await startTestService();
  const tarball = await uploadApp(service, probeApp());
  const created = await service.api('POST', '/v2/deployments', {
    name: 'intruder',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  url = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url;
});
after(() => service?.close());

test("an app cannot reach the edge's runtime socket, pid file, configuration or process", async () => {
  const edgeDir = path.join(service.dataDir, 'edge');
  const socket = path.join(edgeDir, 'admin.sock');
  const haproxy = await fs
    .readFile(path.join(edgeDir, 'haproxy.pid'), 'utf8')
    .then((text) => Number(text.trim()))
    .catch(() => null);
  // The honest part: the app answers, and (with HAProxy) the socket and pid file exist on the host.
  assert.equal((await call('/healthz')).ok, true);
  const installed = await fs.access('/usr/sbin/haproxy').then(
    () => true,
    () => false,
  );
  assert.equal(haproxy !== null, installed, 'HAProxy serves the apps when it is installed');
  if (haproxy !== null) {
    assert.ok(processAlive(haproxy), 'HAProxy runs');
    await fs.stat(socket);
  }

  const reached = await call(`/unix?path=${encodeURIComponent(socket)}`);
  assert.equal(reached.connected, false, `the app reached the edge's runtime socket: ${JSON.stringify(reached)}`);
  const listed = await sh(
    `ls -la ${edgeDir}; cat ${edgeDir}/haproxy.pid ${edgeDir}/haproxy.cfg ${edgeDir}/routes.map; ls /proc`,
  );
  assert.match(listed, /\bself\b/, `the commands ran: ${listed}`);
  assert.doesNotMatch(listed, /admin\.sock|routes\.map\s|stats socket|frontend apps|app_0/, listed);
  if (haproxy !== null) {
    const pids = listed.split(/\s+/).filter((word) => /^\d+$/.test(word));
    assert.ok(!pids.includes(String(haproxy)), `the app sees HAProxy's pid ${haproxy}: ${listed}`);
    const killed = await sh(`kill -TERM ${haproxy}; kill -STOP ${haproxy}; echo rc=$?`);
    assert.match(killed, /rc=[1-9]/, killed);
    assert.ok(processAlive(haproxy), 'HAProxy still runs');
    const state = (await fs.readFile(`/proc/${haproxy}/stat`, 'utf8')).split(' ')[2];
    assert.notEqual(state, 'T', 'HAProxy was not stopped');
  }
  // Still served after all that.
  assert.equal((await call('/healthz')).ok, true);
});

test("the credential an app is given opens none of the API's workspace routes", async () => {
  for (const route of ['/v2/deployments', '/v2/api-keys', '/v2/workspaces', '/v2/sso/mappings', '/v2/sso/sessions']) {
    const answer = await sh(
      `node -e 'fetch(process.env.SLIPWAY_API_URL + "${route}", { headers: { authorization: "Bearer " + process.env.SLIPWAY_AGENT_CREDENTIAL } }).then(async (r) => console.log("status=" + r.status + " " + (await r.text()).slice(0, 200)), (e) => console.log("status=0 " + e))'`,
    );
    assert.match(answer, /status=(0|401|403) /, `${route}: ${answer}`);
  }
});
