/**
 * Attacks by an app's own code on what other tenants have on this service, through the ways out it is
 * given: the service's API (SLIPWAY_API_URL, reached through its forward), where `/metrics` needs no key
 * unless the operator set SLIPWAY_METRICS_TOKEN. Per-deployment series name each app (its deployment
 * id and host label) with its traffic and resources: open, they would hand every tenant's deployments,
 * and the host names of their apps, to any app and any client of the API.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import * as tar from 'tar';
import { newCredential } from '../../src/auth/credentials.ts';
import { createApiKey, createWorkspace } from '../../src/store/tenancy.ts';
import { probeApp } from '../dataplane/containment-apps.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../fakes/otlp-receiver.ts';
import {
  requestApp,
  startTestService,
  uploadApp,
  writeApp,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { test } from '../support/limited-test.ts';

let receiver: OtlpReceiver;
let service: TestService;
let attackerUrl: string;
let victim: { id: string; slug: string };

/** A call to the API as a member of another workspace of the same organization. */
async function asVictim(key: string, method: string, url: string, body?: unknown) {
  const response = await fetch(`${service.base}${url}`, {
    method,
    headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: await response.json() };
}

/** Packs and uploads an app with `key`; its source_tarball_path. */
async function uploadAs(key: string, files: Record<string, string>): Promise<string> {
  const dir = await writeApp(files);
  const archive = path.join(os.tmpdir(), `slipway-attack-${randomBytes(4).toString('hex')}.tar.gz`);
  try {
    await tar.c({ gzip: true, file: archive, cwd: dir, portable: true }, await fs.readdir(dir));
    const response = await fetch(`${service.base}/v2/uploads`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/gzip' },
      body: await fs.readFile(archive),
    });
    const body = (await response.json()) as { source_tarball_path: string };
    assert.equal(response.status, 201, JSON.stringify(body));
    return body.source_tarball_path;
  } finally {
    await fs.rm(archive, { force: true });
    await fs.rm(dir, { recursive: true, force: true });
  }
}

async function deploy(
  call: (method: string, url: string, body?: unknown) => Promise<{ status: number; body: any }>,
  name: string,
  tarball: string,
): Promise<{ id: string; url: string }> {
  const created = await call('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  // Polled with the caller's own key: another workspace's deployment does not exist for the admin key.
  let revision: any;
  for (let tries = 0; tries < 600; tries++) {
    revision = (await call('GET', `/v2/deployments/${created.body.id}/revisions/${created.body.latest_revision_id}`))
      .body;
    if (!/^(CREATING|QUEUED|AWAITING_BUILD|BUILDING|AWAITING_DEPLOY|DEPLOYING)$/.test(revision.status)) break;
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const read = await call('GET', `/v2/deployments/${created.body.id}`);
  return { id: created.body.id, url: read.body.source_config.custom_url };
}

before(async () => {
  receiver = await startOtlpReceiver();
  service = await startTestService({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
  // The victim: a member of another workspace, with an app of its own that gets some traffic.
  const { db } = service.database;
  const organization = await db.selectFrom('organizations').select('id').executeTakeFirstOrThrow();
  const workspace = await createWorkspace(db, organization.id, 'victim');
  const { value: key, hash: keyHash, prefix: keyPrefix } = newCredential('apiKey');
  await createApiKey(db, {
    organizationId: organization.id,
    workspaceId: workspace.id,
    name: 'victim member',
    role: 'member',
    hash: keyHash,
    prefix: keyPrefix,
  });
  const victimCall = (method: string, url: string, body?: unknown) => asVictim(key, method, url, body);
  const victimTarball = await uploadAs(key, probeApp());
  const deployed = await deploy(victimCall, 'private-payroll', victimTarball);
  victim = { id: deployed.id, slug: new URL(deployed.url).hostname.split('.')[0]! };
  assert.equal((await requestApp(service, deployed.url, '/healthz')).status, 200);

  const attacker = await deploy((m, u, b) => service.api(m, u, b), 'intruder', await uploadApp(service, probeApp()));
  attackerUrl = attacker.url;
});
after(async () => {
  await service?.close();
  await receiver?.close();
});

/** What the app's shell printed. */
async function shell(cmd: string): Promise<string> {
  const answer = await requestApp(service, attackerUrl, `/sh?cmd=${encodeURIComponent(cmd)}`);
  assert.equal(answer.status, 200, answer.body);
  return (JSON.parse(answer.body) as { output: string }).output;
}

test("an app reads none of another tenant's deployments on the service's /metrics", async () => {
  const cmd =
    `node -e 'fetch(process.env.SLIPWAY_API_URL + "/metrics").then(async (r) => ` +
    `console.log("status=" + r.status + "\\n" + (await r.text())), (e) => console.log("status=0 " + e))'`;
  const output = await shell(cmd);
  // The honest part: /metrics answers the app as it answers anyone, with the service's own series.
  assert.match(output, /status=200/, output);
  assert.match(output, /slipway_deployments\{/, output);
  assert.ok(!output.includes(victim.id), `the app read the other tenant's deployment id on /metrics`);
  assert.ok(!output.includes(victim.slug), `the app read the other tenant's app host name on /metrics`);
});

/**
 * The app's spans reach the operator's collector through the OTLP forward of its sandbox, which every
 * tenant's apps share the collector through; what tells one deployment's spans from another's there is
 * the resource's `slipway.deployment.id`. An app's forward must not carry spans in another deployment's
 * name into it (the other tenant's traces would show what the attacker wrote).
 */
test(
  "an app's OTLP forward does not deliver spans in another deployment's name",
  {
    todo: 'finding: the OTLP forward is a raw TCP pipe; src/dataplane/app-host-access.ts must set the resource attributes (or refuse spans naming another deployment)',
  },
  async () => {
    const script = String.raw`
const attr = (key, value) => ({ key, value: { stringValue: value } });
const own = Object.fromEntries(process.env.OTEL_RESOURCE_ATTRIBUTES.split(",").map((p) => p.split("=")).map(([k, v]) => [k, decodeURIComponent(v)]));
const span = (name) => ({ scopeSpans: [{ scope: { name: "x" }, spans: [{ traceId: "1".repeat(32), spanId: "2".repeat(16), name, kind: 1, startTimeUnixNano: "1", endTimeUnixNano: "2", attributes: [] }] }] });
const forged = { resource: { attributes: [attr("service.name", "private-payroll"), attr("slipway.deployment.id", process.argv[1])] }, ...span("forged by the intruder") };
const honest = { resource: { attributes: [attr("service.name", process.env.OTEL_SERVICE_NAME), ...Object.entries(own).map(([k, v]) => attr(k, v))] }, ...span("honest span of the intruder") };
fetch(process.env.OTEL_EXPORTER_OTLP_ENDPOINT + "/v1/traces", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ resourceSpans: [forged, honest] }) })
  .then((r) => console.log("status=" + r.status), (e) => console.log("status=0 " + (e.cause || e)));`;
    const output = await shell(`node -e '${script}' ${victim.id}`);
    assert.match(output, /status=(200|4\d\d)/, output);
    // The honest part: the app's own span arrives, in its own name; the forged one came in the same request.
    const honest = await receiver.waitFor("the app's own span", (s) => s.name === 'honest span of the intruder');
    assert.notEqual(honest.resource['slipway.deployment.id'], victim.id);
    const forged = receiver.spans.filter(
      (s) => s.name === 'forged by the intruder' && s.resource['slipway.deployment.id'] === victim.id,
    );
    assert.deepEqual(forged, [], "the collector got a span in the other tenant's deployment's name");
  },
);
