/**
 * `langgraph deploy --remote` against the real service, end to end: the exact request sequence of
 * LangChain's CLI (find by name, empty create, upload URL, PUT without a key, PATCH with
 * langgraph_config_path, revision polling with build logs in its shape) deploys examples/langgraph-js
 * unmodified; its graph then answers through the stable URL with LangGraph's own API (`/runs/wait`,
 * `/runs/stream` streamed as it runs). A monorepo project (apps/agent/langgraph.json with a local
 * dependency in libs/) whose graph fails to load ends DEPLOY_FAILED with the server's error in its
 * deploy logs.
 *
 * The builds install from the npm registry (the project's lockfile, plus the pinned
 * @langchain/langgraph-api): each takes a minute or so.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar';
import { ADMIN_KEY } from '../helpers.ts';
import { startTestService, type TestService } from '../dataplane/data-plane-harness.ts';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/langgraph-js');
/** What the CLI's poll loop stops at. */
const TERMINAL = ['DEPLOYED', 'CREATE_FAILED', 'BUILD_FAILED', 'DEPLOY_FAILED', 'SKIPPED'];

let service: TestService;
let scratch: string;
before(async () => {
  // Generous: a broken graph ends the revision as soon as the server exits with its error, and on a
  // loaded machine loading the graph alone can take most of a minute.
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '180' });
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-langgraph-'));
});
after(async () => {
  await service.close();
  await fs.rm(scratch, { recursive: true, force: true });
});

/** A request as the CLI's HostBackendClient makes it: X-Api-Key and Accept on every one, JSON bodies. */
async function cli(method: string, url: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${service.base}${url}`, {
    method,
    headers: {
      'x-api-key': ADMIN_KEY,
      accept: 'application/json',
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  return { status: response.status, body: text === '' ? undefined : JSON.parse(text) };
}

/** The archive the CLI makes: the project's files at the root, without node_modules or what .gitignore lists. */
async function archive(dir: string): Promise<Buffer> {
  const file = path.join(scratch, `source-${randomBytes(4).toString('hex')}.tar.gz`);
  const entries = (await fs.readdir(dir)).filter((name) => !['node_modules', '.langgraph_api', '.env'].includes(name));
  await tar.c({ gzip: true, file, cwd: dir, portable: true }, entries);
  return fs.readFile(file);
}

interface Deployed {
  deploymentId: string;
  revision: { id: string; status: string; failure_reason: string | null; failure_message: string | null };
  buildLog: string[];
}

/** `langgraph deploy --remote --name <name>` for the project in `dir`, with the secrets it would send. */
async function deployLikeTheCli(
  name: string,
  dir: string,
  secrets: { name: string; value: string }[],
  configPath = 'langgraph.json',
): Promise<Deployed> {
  // 1. Look the deployment up by name; 2. create it with an empty source revision config.
  const listed = await cli('GET', `/v2/deployments?name_contains=${name}`);
  assert.equal(listed.status, 200);
  let deploymentId: string | undefined = listed.body.resources.find((d: { name: string }) => d.name === name)?.id;
  if (!deploymentId) {
    const created = await cli('POST', '/v2/deployments', {
      name,
      source: 'internal_source',
      source_config: { deployment_type: 'dev' },
      source_revision_config: {},
      secrets,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    deploymentId = created.body.id as string;
  }
  // 3. An upload URL; 4. the PUT, without an API key.
  const target = await cli('POST', `/v2/deployments/${deploymentId}/upload-url`);
  assert.equal(target.status, 200, JSON.stringify(target.body));
  const body = await archive(dir);
  const put = await fetch(target.body.upload_url, {
    method: 'PUT',
    headers: { 'content-type': 'application/gzip', 'content-length': String(body.length) },
    body: new Uint8Array(body),
  });
  assert.equal(put.status, 200, await put.text());
  // 5. The PATCH that makes the revision.
  const patched = await cli('PATCH', `/v2/deployments/${deploymentId}`, {
    revision_source: 'internal_source',
    source_revision_config: { source_tarball_path: target.body.object_path, langgraph_config_path: configPath },
    secrets,
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  // 6. Poll the newest revision; 7. read its build log meanwhile, from the offset of the last answer.
  const latest = await cli('GET', `/v2/deployments/${deploymentId}/revisions?limit=1`);
  const revisionId: string = latest.body.resources[0].id;
  assert.equal(revisionId, patched.body.latest_revision_id, 'the newest revision is the one the PATCH made');
  const buildLog: string[] = [];
  let offset: string | null = null;
  const readBuildLog = async () => {
    const page = await cli(
      'POST',
      `/v1/projects/${deploymentId}/revisions/${revisionId}/build_logs`,
      offset ? { order: 'asc', limit: 50, offset } : { order: 'asc', limit: 50 },
    );
    assert.equal(page.status, 200, JSON.stringify(page.body));
    for (const entry of page.body.logs) {
      assert.equal(typeof entry.timestamp, 'number');
      assert.ok(['DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL'].includes(entry.level));
      buildLog.push(entry.message);
    }
    offset = page.body.next_offset ?? offset;
    return page.body.logs.length;
  };
  let revision = (await cli('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`)).body;
  await eventually(
    `revision ${revisionId} to reach a final status`,
    async () => {
      if (revision.status === 'AWAITING_BUILD' || revision.status === 'BUILDING') await readBuildLog();
      revision = (await cli('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`)).body;
      return TERMINAL.includes(revision.status);
    },
    { seconds: 240, everyMs: 1_000, describe: () => `status ${revision.status}; build log:\n${buildLog.join('\n')}` },
  );
  // The rest of the build log, page by page (each read takes the next page: a bounded count of pages).
  await eventually('the end of the build log', async () => (await readBuildLog()) === 0, { everyMs: 0 });
  return { deploymentId, revision, buildLog };
}

/** A request to the app through the app edge (the port its URL names), by the app's host name. */
function callApp(
  url: string,
  pathname: string,
  body: unknown,
  onChunk?: (text: string) => void,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const request = http.request(
      {
        host: '127.0.0.1',
        port: Number(new URL(url).port),
        path: pathname,
        method: 'POST',
        headers: {
          host: new URL(url).host,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
        },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
          onChunk?.(chunk);
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}

test('langgraph deploy --remote deploys the example unmodified, and its graph answers at the stable URL', async () => {
  const { deploymentId, revision, buildLog } = await deployLikeTheCli('langgraph-example', EXAMPLE, [
    { name: 'REPLY_PREFIX', value: 'Checked' },
  ]);
  assert.equal(revision.status, 'DEPLOYED', `${JSON.stringify(revision)}\n${buildLog.join('\n')}`);
  assert.ok(
    buildLog.some((line) => line.includes('npm ci')),
    buildLog.join('\n'),
  );
  assert.ok(
    buildLog.some((line) => line.includes('@langchain/langgraph-api@')),
    'the pinned server is added',
  );
  // The graphs' schemas are read once, by the build, not by each instance as it starts.
  assert.ok(
    buildLog.some((line) => line.startsWith('Graph schemas read at build time: agent')),
    buildLog.join('\n'),
  );
  assert.ok(buildLog.some((line) => line === 'Build finished'));

  // What the CLI prints as the app's URL.
  const deployment = await cli('GET', `/v2/deployments/${deploymentId}`);
  const url: string = deployment.body.source_config.custom_url;
  assert.match(url, /^http:\/\/langgraph-example-[0-9a-f]{8}\.localhost:\d+$/);

  // A run, waited for: the graph's output. The deployment's secret wins over the config's env.
  const waited = await callApp(url, '/runs/wait', {
    assistant_id: 'agent',
    input: { text: 'How many words are here? And the longest one?' },
  });
  assert.equal(waited.status, 200, waited.body);
  const output = JSON.parse(waited.body);
  assert.deepEqual(output.findings, ['9 words', 'the longest word is "longest"']);
  assert.equal(output.answer, 'Checked: 9 words; the longest word is "longest".');

  // A run, streamed: each node's update arrives as it happens, not all at the end.
  const arrivals: { at: number; text: string }[] = [];
  const streamed = await callApp(
    url,
    '/runs/stream',
    {
      assistant_id: 'agent',
      input: { text: 'words, sentences and shout' },
      stream_mode: ['updates'],
      config: { configurable: { step_delay_ms: 300 } },
    },
    (text) => arrivals.push({ at: Date.now(), text }),
  );
  assert.equal(streamed.status, 200, streamed.body);
  const updates = arrivals.filter((a) => a.text.includes('event: updates'));
  assert.ok(
    updates.length >= 5,
    `planner, three analyses and the writer, in ${updates.length} chunk(s):\n${streamed.body}`,
  );
  assert.ok(updates.at(-1)!.at - updates[0]!.at >= 900, 'the updates arrived spread over the run, not buffered');
  assert.match(streamed.body, /"answer":"Checked: 4 words; 1 sentence\(s\); shouted: WORDS, SENTENCES AND SHOUT\."/);

  // `langgraph deploy logs`: the running server's output, through the deployment.
  const logs = await cli('POST', `/v1/projects/${deploymentId}/deploy_logs`, {
    limit: 100,
    order: 'desc',
    query: 'Health check passed',
  });
  assert.equal(logs.status, 200);
  assert.equal(logs.body.logs.length, 1, JSON.stringify(logs.body));
});

test("a monorepo project whose graph fails to load ends DEPLOY_FAILED with the server's error in the deploy logs", async () => {
  // As the CLI packs a monorepo: the common root of the project and its local dependencies, with the
  // config at apps/agent/langgraph.json. The graph imports the shared library, which throws.
  const root = path.join(scratch, 'monorepo');
  const agent = path.join(root, 'apps', 'agent');
  await fs.mkdir(path.join(agent, 'src'), { recursive: true });
  await fs.mkdir(path.join(root, 'libs', 'shared'), { recursive: true });
  for (const file of ['package.json', 'package-lock.json'])
    await fs.copyFile(path.join(EXAMPLE, file), path.join(agent, file));
  await fs.writeFile(
    path.join(agent, 'langgraph.json'),
    JSON.stringify({
      node_version: '20',
      graphs: { agent: './src/agent.ts:graph' },
      dependencies: ['.', '../../libs/shared'],
    }),
  );
  await fs.writeFile(
    path.join(agent, 'src', 'agent.ts'),
    "import { knowledgeBase } from '../../../libs/shared/knowledge.ts';\nexport const graph = knowledgeBase();\n",
  );
  await fs.writeFile(
    path.join(root, 'libs', 'shared', 'knowledge.ts'),
    "export function knowledgeBase(): never {\n  throw new Error('the knowledge base is not configured');\n}\n",
  );

  const { deploymentId, revision, buildLog } = await deployLikeTheCli(
    'broken-agent',
    root,
    [],
    'apps/agent/langgraph.json',
  );
  assert.equal(revision.status, 'DEPLOY_FAILED', `${JSON.stringify(revision)}\n${buildLog.join('\n')}`);
  assert.equal(revision.failure_reason, 'health_check_failed');
  assert.ok(
    buildLog.some((line) => line.includes('(cd apps/agent && npm ci')),
    buildLog.join('\n'),
  );
  // The error comes from the shared library: it was in the archive, and the graph loaded it.
  const errors = await cli('POST', `/v1/projects/${deploymentId}/revisions/${revision.id}/deploy_logs`, {
    limit: 100,
    order: 'desc',
    query: 'the knowledge base is not configured',
  });
  assert.equal(errors.status, 200);
  const everything = await cli('POST', `/v1/projects/${deploymentId}/revisions/${revision.id}/deploy_logs`, {
    limit: 200,
    order: 'asc',
  });
  assert.ok(
    errors.body.logs.length > 0,
    `the server's error is in the deploy logs:\n${everything.body.logs.map((l: { message: string }) => l.message).join('\n')}`,
  );
  assert.match(revision.failure_message ?? '', /health/i);
  const deployment = await cli('GET', `/v2/deployments/${deploymentId}`);
  assert.equal(deployment.body.active_revision_id, null, 'nothing serves');
});
