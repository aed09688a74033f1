/**
 * Attack on `GET /metrics` by anyone who reaches the API without a key (a client on the network, an
 * app through its forward to the API): the per-deployment series name every tenant's apps, so an open
 * /metrics must not carry them. With SLIPWAY_METRICS_TOKEN set, the scraper that sends it sees them.
 * (test/attack/app-metrics-2.test.ts makes the same attack from inside an app.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { AppMetrics } from '../../src/routes/metrics.ts';
import { emptyStats } from '../../src/dataplane/edge-stats.ts';
import { createTestApp } from '../helpers.ts';

const OTHER_TENANT = { deploymentId: '3f0c2a51-9d7e-4b8a-a1c2-5e6f7a8b9c0d', slug: 'private-payroll-3f0c2a51' };
/** Its endpoint, with instances and traffic of its own (docs/app-urls.md, "Endpoints"). */
const ENDPOINT = { name: 'quarter-close', label: `${OTHER_TENANT.slug}--quarter-close` };
const TOKEN = 'slwm_scrape-token-0123456789abcdef';

/** What the edge and the worker would report: one app of another tenant, with traffic. */
async function apps(): Promise<AppMetrics> {
  const stats = { ...emptyStats(), requests: 7 };
  stats.responses['2xx'] = 7;
  const endpointStats = { ...emptyStats(), requests: 3 };
  endpointStats.responses['5xx'] = 3;
  return {
    edge: new Map([
      [OTHER_TENANT.slug, stats],
      [ENDPOINT.label, endpointStats],
      // An endpoint just removed: still counted by the edge, no longer listed by the runtime.
      [`${OTHER_TENANT.slug}--leaving`, endpointStats],
    ]),
    runtime: [
      {
        deploymentId: OTHER_TENANT.deploymentId,
        slug: ENDPOINT.label,
        endpoint: ENDPOINT.name,
        revisionId: '00000000-0000-4000-8000-000000000001',
        instances: [
          {
            instanceId: 'web-0',
            kind: 'web',
            restarts: 2,
            usage: { cpuSeconds: 0.5, memoryBytes: 1 << 21 },
          },
        ],
      },
      {
        deploymentId: OTHER_TENANT.deploymentId,
        slug: OTHER_TENANT.slug,
        revisionId: '00000000-0000-4000-8000-000000000002',
        instances: [
          {
            instanceId: 'web-0',
            kind: 'web',
            restarts: 0,
            usage: { cpuSeconds: 1.5, memoryBytes: 1 << 20 },
          },
        ],
      },
    ],
  };
}

test("an open /metrics names no tenant's deployment", async () => {
  const t = await createTestApp({}, { apps });
  try {
    const scraped = await t.app.inject({ method: 'GET', url: '/metrics' });
    assert.equal(scraped.statusCode, 200);
    // The honest part: the service's own series are there.
    assert.match(scraped.body, /slipway_http_requests_total|slipway_process_cpu/);
    assert.ok(!scraped.body.includes(OTHER_TENANT.deploymentId), 'an open /metrics names a deployment');
    assert.ok(!scraped.body.includes(OTHER_TENANT.slug), "an open /metrics names an app's host");
    for (const name of [ENDPOINT.name, 'leaving'])
      assert.ok(!scraped.body.includes(name), "an open /metrics names a deployment's endpoint");
    assert.doesNotMatch(scraped.body, /endpoint=/);
    assert.doesNotMatch(scraped.body, /^slipway_app_\w+\{/m);
  } finally {
    await t.close();
  }
});

test('with SLIPWAY_METRICS_TOKEN the scraper that sends it gets the per-deployment series', async () => {
  const t = await createTestApp({ SLIPWAY_METRICS_TOKEN: TOKEN }, { apps });
  try {
    assert.equal((await t.app.inject({ method: 'GET', url: '/metrics' })).statusCode, 401);
    const scraped = await t.app.inject({
      method: 'GET',
      url: '/metrics',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(scraped.statusCode, 200);
    assert.match(
      scraped.body,
      new RegExp(
        `^slipway_app_requests_total\\{deployment_id="${OTHER_TENANT.deploymentId}",app="${OTHER_TENANT.slug}"\\} 7$`,
        'm',
      ),
    );
    assert.match(scraped.body, /^slipway_app_memory_bytes\{.*instance="web-0"\} 1048576$/m);
    // The deployment's own route keeps exactly its labels; its endpoint's have theirs, with `endpoint`.
    const own = `deployment_id="${OTHER_TENANT.deploymentId}",app="${OTHER_TENANT.slug}"`;
    const at = `deployment_id="${OTHER_TENANT.deploymentId}",app="${ENDPOINT.label}",endpoint="${ENDPOINT.name}"`;
    const line = (text: string) => assert.ok(scraped.body.split('\n').includes(text), `no line ${text}`);
    line(`slipway_app_responses_total{${own},code="2xx"} 7`);
    line(`slipway_app_requests_total{${at}} 3`);
    line(`slipway_app_responses_total{${at},code="5xx"} 3`);
    line(
      `slipway_app_requests_total{deployment_id="${OTHER_TENANT.deploymentId}",app="${OTHER_TENANT.slug}--leaving",endpoint="leaving"} 3`,
    );
    line(`slipway_app_instance_restarts_total{${own},instance="web-0"} 0`);
    line(`slipway_app_instance_restarts_total{${at},instance="web-0"} 2`);
    line(`slipway_app_memory_bytes{${at},instance="web-0"} 2097152`);
    line(`slipway_app_cpu_seconds_total{${at},instance="web-0"} 0.5`);
  } finally {
    await t.close();
  }
});
