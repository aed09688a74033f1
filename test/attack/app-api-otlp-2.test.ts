/**
 * Attacks by an app's own code on what it shares with other tenants' apps on the way out of its sandbox
 * (issue 33, items 2 and 8), run from inside by the probe app of test/dataplane/containment-apps.ts:
 *
 * - API streams: every app reached the API from 127.0.0.1 and shared one per-address cap, so one app
 *   holding it refused every other app's follows and long-polls. Now an app's own way to the API tells
 *   the API its deployment (src/http/app-connections.ts), and each deployment has its own budget.
 * - OTLP: an app's exports went to the collector through a raw TCP pipe, so an app could send spans in
 *   another deployment's name and reach any path of the collector. Now they go through the service's
 *   relay (src/telemetry/otlp-relay.ts): only POST /v1/{traces,metrics,logs}, size-bounded, with the
 *   `slipway.*` resource attributes set to the sender's own.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { probeApp } from '../dataplane/containment-apps.ts';
import {
  deployApp,
  requestApp,
  startTestService,
  type DeployedApp,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../fakes/otlp-receiver.ts';
import { test } from '../support/limited-test.ts';

/** Each deployment's budget, and (before) the one budget of 127.0.0.1 that every app shared. */
const CAP = 3;
const COLLECTOR_TOKEN = 'collector-secret-0123456789';

type App = DeployedApp;

let receiver: OtlpReceiver;
let service: TestService;
let sender: App;
let victim: App;
let workspaceId: string;

const deploy = (name: string): Promise<App> => deployApp(service, probeApp(), name);

/** A shell command in `app`'s sandbox; its output. */
async function sh(app: App, cmd: string): Promise<string> {
  const answer = await requestApp(service, app.url, `/sh?cmd=${encodeURIComponent(cmd)}`);
  assert.equal(answer.status, 200, `${answer.status} ${answer.body}`);
  return (JSON.parse(answer.body) as { output: string }).output;
}

/** Writes `content` to `file` in `app`'s sandbox. */
async function put(app: App, file: string, content: Uint8Array | string): Promise<void> {
  const b64 = Buffer.from(content).toString('base64');
  const out = await sh(
    app,
    `node -e 'require("fs").writeFileSync(process.argv[1], Buffer.from(process.argv[2], "base64"))' ${file} ${b64} && echo written`,
  );
  assert.match(out, /written/, out);
}

async function memberKey(name: string): Promise<string> {
  const made = await service.api('POST', '/v2/api-keys', { name, role: 'member' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body.key as string;
}

before(async () => {
  receiver = await startOtlpReceiver();
  service = await startTestService({
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer ${COLLECTOR_TOKEN}`,
    SLIPWAY_STREAMS_PER_DEPLOYMENT: String(CAP),
    SLIPWAY_STREAMS_PER_ADDRESS: String(CAP),
  });
  sender = await deploy('otlp-forger');
  victim = await deploy('otlp-victim');
  workspaceId = (await service.api('GET', `/v2/deployments/${sender.id}`)).body.tenant_id;
});
after(async () => {
  await service?.close();
  await receiver?.close();
});

describe("one app's API streams do not refuse another app's", () => {
  test("an app holding its cap of follows leaves another deployment's app its own", async () => {
    // The app's own output, followed while it runs.
    const logs = (app: App) => `/v2/deployments/${app.id}/revisions/${app.revisionId}/logs?type=deploy&follow=true`;
    // The sender opens one more follow than its budget and holds those it got.
    await put(
      sender,
      '/tmp/hold.mjs',
      `import fs from 'node:fs';
const [key, url, n] = process.argv.slice(2);
const statuses = [];
const open = [];
for (let i = 0; i < Number(n); i++) {
  const r = await fetch(process.env.SLIPWAY_API_URL + url, { headers: { 'x-api-key': key } });
  statuses.push(r.status);
  open.push(r);
  if (r.status !== 200) await r.body?.cancel();
}
fs.writeFileSync('/tmp/hold.out', statuses.join(','));
setTimeout(() => {}, 300000);
`,
    );
    const senderKey = await memberKey('sender app key');
    await sh(sender, `nohup node /tmp/hold.mjs ${senderKey} '${logs(sender)}' ${CAP + 1} </dev/null >/dev/null 2>&1 &`);
    let held = '';
    for (let i = 0; i < 300 && !/\d+,\d+,\d+,\d+/.test(held); i++) {
      await sleep(100);
      held = await sh(sender, 'cat /tmp/hold.out 2>/dev/null || true');
    }
    assert.equal(held.trim(), '200,200,200,429', 'the sending app holds its cap, and no more');

    const victimKey = await memberKey('victim app key');
    const answer = await sh(
      victim,
      `node -e 'fetch(process.env.SLIPWAY_API_URL + process.argv[1], { headers: { "x-api-key": process.argv[2] } }).then((r) => { console.log("status=" + r.status); process.exit(0); }, (e) => { console.log("error " + e); process.exit(0); })' '${logs(victim)}' ${victimKey}`,
    );
    assert.match(answer, /status=200/, `another deployment's app was refused its follow: ${answer}`);
  });
});

describe("an app's OTLP exports go through the service", () => {
  /** The spans of one export, made by OpenTelemetry's own SDK under a resource naming the victim. */
  function forgedSpans(name: string) {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({
        'service.name': 'forger',
        'slipway.deployment.id': victim.id,
        'slipway.revision.id': victim.revisionId,
        'slipway.workspace.id': '00000000-0000-4000-8000-000000000000',
        'slipway.extra': 'made up',
      }),
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    provider.getTracer('forger').startSpan(name).end();
    return exporter.getFinishedSpans();
  }

  before(async () => {
    await put(
      sender,
      '/tmp/send.mjs',
      `import fs from 'node:fs';
const [method, path, type, file, encoding] = process.argv.slice(2);
const body = method === 'GET' ? undefined : fs.readFileSync(file);
const headers = { 'content-type': type, ...(encoding ? { 'content-encoding': encoding } : {}) };
const r = await fetch(process.env.OTEL_EXPORTER_OTLP_ENDPOINT + path, { method, headers, body }).catch((e) => ({ status: 'error ' + e.cause?.code }));
console.log('status=' + r.status);
`,
    );
  });

  const send = (args: string) => sh(sender, `node /tmp/send.mjs ${args}`);

  test("spans in another deployment's name arrive as the sender's own, JSON and protobuf", async () => {
    const env = await sh(sender, 'env | grep ^OTEL_ || true');
    assert.doesNotMatch(env, new RegExp(COLLECTOR_TOKEN), "the collector's token is the service's, not the app's");
    await put(sender, '/tmp/forged.json', JsonTraceSerializer.serializeRequest(forgedSpans('forged-json'))!);
    await put(sender, '/tmp/forged.pb', ProtobufTraceSerializer.serializeRequest(forgedSpans('forged-protobuf'))!);
    assert.match(await send('POST /v1/traces application/json /tmp/forged.json'), /status=200/);
    assert.match(await send('POST /v1/traces application/x-protobuf /tmp/forged.pb'), /status=200/);
    for (const name of ['forged-json', 'forged-protobuf']) {
      const span = await receiver.waitFor(name, (s) => s.name === name);
      assert.equal(span.resource['slipway.deployment.id'], sender.id, `${name}: in the victim's name`);
      assert.equal(span.resource['slipway.revision.id'], sender.revisionId);
      assert.equal(span.resource['slipway.workspace.id'], workspaceId);
      assert.equal(span.resource['slipway.extra'], undefined, `${name}: slipway.* is the service's to set`);
      assert.equal(span.resource['service.name'], 'forger', "the app's other attributes are its own");
    }
    const relayed = receiver.requests.filter((r) => r.headers['content-type'] === 'application/x-protobuf');
    assert.ok(relayed.length > 0);
    for (const r of relayed) assert.equal(r.headers.authorization, `Bearer ${COLLECTOR_TOKEN}`);
  });

  test('other paths and methods, other encodings and huge bodies are refused before the collector', async () => {
    const before = receiver.requests.length;
    await put(sender, '/tmp/empty.json', '{"resourceSpans":[]}');
    assert.match(await send('POST /v1/other application/json /tmp/empty.json'), /status=404/);
    assert.match(await send('POST / application/json /tmp/empty.json'), /status=404/);
    assert.match(await send('POST /v1/traces/../../admin application/json /tmp/empty.json'), /status=404/);
    assert.match(await send('GET /v1/traces application/json -'), /status=405/);
    assert.match(await send('POST /v1/traces text/plain /tmp/empty.json'), /status=415/);
    // Another spelling of the list, which a collector reads too but the relay would not rewrite.
    await put(sender, '/tmp/snake.json', '{"resource_spans":[{"resource":{"attributes":[]}}]}');
    assert.match(await send('POST /v1/traces application/json /tmp/snake.json'), /status=400/);
    // 5 MiB as sent, and 64 MiB once a 64 KiB gzip body is inflated.
    await sh(
      sender,
      `node -e 'require("fs").writeFileSync("/tmp/huge.json", "{\\"resourceSpans\\":[]}" + " ".repeat(5 << 20))'`,
    );
    assert.match(await send('POST /v1/traces application/json /tmp/huge.json'), /status=(413|error)/);
    await sh(
      sender,
      `node -e 'require("fs").writeFileSync("/tmp/bomb.gz", require("zlib").gzipSync(Buffer.concat([Buffer.from("{\\"resourceSpans\\":[]}"), Buffer.alloc(64 << 20, 32)])))'`,
    );
    assert.match(await send('POST /v1/traces application/json /tmp/bomb.gz gzip'), /status=413/);
    // The relay still serves the sender afterwards.
    assert.match(await send('POST /v1/traces application/json /tmp/empty.json'), /status=200/);
    const reached = receiver.requests
      .slice(before)
      .filter((r) => r.headers.authorization === `Bearer ${COLLECTOR_TOKEN}`);
    const fromApp = reached.filter((r) => r.headers['content-type'] === 'application/json' && r.bytes < 100);
    assert.deepEqual(
      fromApp.map((r) => `${r.method} ${r.path}`),
      ['POST /v1/traces'],
      'only the last, well-formed export reached the collector',
    );
    for (const r of receiver.requests) assert.ok(r.bytes <= 4 * 1024 * 1024, `${r.bytes} bytes reached the collector`);
  });
});
