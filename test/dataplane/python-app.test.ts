/**
 * A Python app on the local data plane with zero configuration beyond `{}`: the runtime is detected,
 * a virtual environment is made, and `main.py` is started with PORT and its secrets.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { requestApp, startTestService, uploadApp, waitForRevision, type TestService } from './data-plane-harness.ts';
import { test } from '../support/limited-test.ts';

const MAIN = `
import http.server, json, os, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"python": sys.version_info[0], "venv": sys.prefix != sys.base_prefix, "greeting": os.environ.get("GREETING")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer((os.environ["HOST"], int(os.environ["PORT"])), Handler).serve_forever()
`;

let service: TestService;
before(async () => {
  service = await startTestService();
});
after(async () => {
  await service.close();
});

test('a Python app is detected, gets a virtualenv, and serves', async () => {
  const tarball = await uploadApp(service, { 'main.py': MAIN, 'slipway.json': JSON.stringify({ database: false }) });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'py-agent',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'GREETING', value: 'hi from python' }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url;
  const answer = JSON.parse((await requestApp(service, url, '/')).body);
  assert.deepEqual(answer, { python: 3, venv: true, greeting: 'hi from python' });
});
