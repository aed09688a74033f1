/**
 * Per-deployment metrics on /metrics (src/routes/metrics.ts with the edge's counts and the local data
 * plane's instances): requests and responses at the stable URL, instance restarts, CPU and memory from
 * the instances' cgroups, labelled with the deployment's id and its app's host label.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { requestApp, startTestService, uploadApp, waitForRevision, type TestService } from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SERVER = `
import http from 'node:http';
http.createServer((req, res) => {
  if (req.url === '/exit') { res.end('bye'); setTimeout(() => process.exit(7), 50); return; }
  res.writeHead(req.url === '/missing' ? 404 : 200);
  res.end('ok');
}).listen(Number(process.env.PORT), process.env.HOST);
`;

const METRICS_TOKEN = 'slwm_scraper-token-0123456789';
let service: TestService;
before(async () => {
  // The per-deployment series are for the operator's scraper only (they name every tenant's apps).
  service = await startTestService({ SLIPWAY_METRICS_TOKEN: METRICS_TOKEN });
});
after(async () => {
  await service.close();
});

/** The samples of one metric: labels and value. */
async function samples(name: string): Promise<{ labels: Record<string, string>; value: number }[]> {
  const response = await fetch(`${service.base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  assert.equal(response.status, 200);
  const text = await response.text();
  const found: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const match = /^(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = Object.fromEntries([...match[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
    found.push({ labels, value: Number(match[3]) });
  }
  return found;
}

test("an app's traffic, restarts and resources are on /metrics, by deployment", async () => {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({
      name: 'measured',
      private: true,
      type: 'module',
      scripts: { start: 'node server.js' },
    }),
    'server.js': SERVER,
    'slipway.json': JSON.stringify({ health_check_path: '/' }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'measured-agent',
    source: 'internal_source',
    source_config: {},
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const revision = await waitForRevision(service, id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  const slug = new URL(url).hostname.split('.')[0]!;

  for (const path of ['/', '/a', '/b', '/missing']) await requestApp(service, url, path);
  const ofApp = (s: { labels: Record<string, string> }) => s.labels.deployment_id === id && s.labels.app === slug;
  // The edge's threads may add a request's last counters a moment after its answer went out.
  let seen = '';
  await eventually(
    'the four requests counted',
    async () => {
      const requests = (await samples('slipway_app_requests_total')).find(ofApp);
      const responses = (await samples('slipway_app_responses_total')).filter(ofApp);
      seen = JSON.stringify({ requests, responses });
      return (
        requests !== undefined &&
        requests.value >= 4 &&
        (responses.find((s) => s.labels.code === '2xx')?.value ?? 0) >= 3 &&
        responses.find((s) => s.labels.code === '4xx')?.value === 1
      );
    },
    { seconds: 30, describe: () => seen },
  );
  assert.ok((await samples('slipway_app_response_time_average_seconds')).some(ofApp));

  const memory = (await samples('slipway_app_memory_bytes')).find((s) => ofApp(s) && s.labels.instance === 'web-0');
  const cpu = (await samples('slipway_app_cpu_seconds_total')).find((s) => ofApp(s) && s.labels.instance === 'web-0');
  if (/resources: no resource limits/.test(service.worker?.isolation ?? '')) {
    // Usage comes from the instance's cgroup: a service that may make none (an ordinary user without a
    // delegated cgroup, as in CI's ordinary-user run) shows none rather than a made-up zero.
    assert.equal(memory, undefined);
    assert.equal(cpu, undefined);
  } else {
    assert.ok(memory && memory.value > 1024 * 1024, `memory ${JSON.stringify(memory)}`);
    assert.ok(cpu && cpu.value > 0, `cpu ${JSON.stringify(cpu)}`);
  }

  // An endpoint of the deployment: its route and instances have series of their own, labelled with it.
  const put = await service.api('PUT', `/v2/deployments/${id}/endpoints/canary`, { revision_id: revision.id });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const endpointUrl: string = put.body.url;
  await eventually('the endpoint served', async () => {
    const got = await service.api('GET', `/v2/deployments/${id}/endpoints/canary`);
    return got.body.served_revision_id === revision.id;
  });
  for (const path of ['/', '/missing']) await requestApp(service, endpointUrl, path);
  const ofEndpoint = (s: { labels: Record<string, string> }) =>
    s.labels.deployment_id === id && s.labels.app === `${slug}--canary` && s.labels.endpoint === 'canary';
  await eventually(
    "the endpoint's requests counted",
    async () => {
      const requests = (await samples('slipway_app_requests_total')).find(ofEndpoint);
      const responses = (await samples('slipway_app_responses_total')).filter(ofEndpoint);
      seen = JSON.stringify({ requests, responses });
      return (
        requests?.value === 2 &&
        responses.find((s) => s.labels.code === '2xx')?.value === 1 &&
        responses.find((s) => s.labels.code === '4xx')?.value === 1
      );
    },
    { seconds: 30, describe: () => seen },
  );
  // The deployment's own series keep their labels and are not the endpoint's.
  const own = (await samples('slipway_app_requests_total')).filter(ofApp);
  assert.equal(own.length, 1);
  assert.deepEqual(Object.keys(own[0]!.labels).sort(), ['app', 'deployment_id']);
  assert.ok(own[0]!.value >= 4 && own[0]!.value < 6, JSON.stringify(own));
  const endpointMemory = (await samples('slipway_app_memory_bytes')).find(
    (s) => ofEndpoint(s) && s.labels.instance === 'web-0',
  );
  if (memory === undefined) assert.equal(endpointMemory, undefined);
  else assert.ok(endpointMemory && endpointMemory.value > 1024 * 1024, `memory ${JSON.stringify(endpointMemory)}`);
  assert.ok(
    (await samples('slipway_app_instance_restarts_total')).some((s) => ofEndpoint(s) && s.labels.instance === 'web-0'),
  );

  // The app exits: the supervisor starts it again, and the restart is counted.
  await requestApp(service, url, '/exit');
  await eventually('the restart counted', async () => {
    const restarts = (await samples('slipway_app_instance_restarts_total')).find(
      (s) => ofApp(s) && s.labels.instance === 'web-0',
    );
    return restarts !== undefined && restarts.value === 1 ? restarts : undefined;
  });
});
