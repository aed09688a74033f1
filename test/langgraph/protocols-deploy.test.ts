/**
 * MCP and A2A through a real deployment on the data plane: a LangGraph project (examples/langgraph-js
 * with the chat graph of test/fixtures/langgraph-protocols) deployed with two instances answers the
 * official MCP client and A2A client at its stable URL, through the app edge; an A2A conversation
 * started through one instance continues through the other, and after a redeploy.
 *
 * The build installs from the npm registry (the project's lockfile, plus the pinned server, its
 * PostgreSQL layer and the MCP and A2A SDKs): it takes a minute or two.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { TaskState, type Task } from '@a2a-js/sdk';
import {
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { a2aClient, text, textOf } from './a2a-clients.ts';
import { eventually } from '../support/wait.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXAMPLE = path.resolve(HERE, '../../examples/langgraph-js');
const FIXTURE = path.resolve(HERE, '../fixtures/langgraph-protocols');

let service: TestService;
let source: string;
let deploymentId: string;
let url: string;

before(async () => {
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '240' });
  source = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-langgraph-protocols-'));
  await fs.cp(EXAMPLE, source, { recursive: true, filter: (from) => !from.includes('node_modules') });
  await fs.cp(path.join(FIXTURE, 'chat.mjs'), path.join(source, 'src', 'chat.mjs'));
  await fs.cp(path.join(FIXTURE, 'langgraph.json'), path.join(source, 'langgraph.json'));
  const tarball = await uploadApp(service, source);
  const created = await service.api('POST', '/v2/deployments', {
    name: 'protocol-agent',
    source: 'internal_source',
    source_config: { resource_spec: { min_scale: 2 } },
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'langgraph.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  deploymentId = created.body.id;
  const revisionId: string = created.body.latest_revision_id;
  const revision = await waitForRevision(service, deploymentId, revisionId, undefined, 600);
  const build = await revisionLog(service, deploymentId, revisionId, 'build');
  assert.equal(revision.status, 'DEPLOYED', `${JSON.stringify(revision)}\n${build.join('\n')}`);
  assert.ok(
    build.some((line) => line.includes('@modelcontextprotocol/sdk@') && line.includes('@a2a-js/sdk@')),
    'the build adds the pinned MCP and A2A SDKs',
  );
  url = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config.custom_url;
});

after(async () => {
  await service?.close();
  await fs.rm(source, { recursive: true, force: true });
});

/**
 * `fetch` to the stable URL (`<slug>.localhost`, which need not resolve here) through the app edge on
 * this machine, by its host name; or to one instance's own port.
 */
function fetchVia(port: number, host: string): typeof fetch {
  return async (input, init) => {
    const target = new URL(input instanceof Request ? input.url : String(input));
    const headers = new Headers(init?.headers);
    const body = init?.body == null ? undefined : Buffer.from(await new Response(init.body).arrayBuffer());
    return new Promise<Response>((resolve, reject) => {
      const request = http.request(
        {
          host: '127.0.0.1',
          port,
          path: `${target.pathname}${target.search}`,
          method: init?.method ?? 'GET',
          headers: { ...Object.fromEntries(headers.entries()), host },
        },
        (response) => {
          const answer = new Headers();
          for (const [name, value] of Object.entries(response.headers))
            if (value !== undefined) answer.set(name, Array.isArray(value) ? value.join(', ') : value);
          const status = response.statusCode ?? 0;
          const stream = status === 204 || status === 304 ? null : (Readable.toWeb(response) as ReadableStream);
          resolve(new Response(stream, { status, headers: answer }));
        },
      );
      request.on('error', reject);
      init?.signal?.addEventListener('abort', () => request.destroy(new Error('aborted')));
      request.end(body);
    });
  };
}

const edgeFetch = () => fetchVia(Number(new URL(url).port) || service.edge.port, new URL(url).host);

const a2a = (fetchImpl: typeof fetch, base: string) => a2aClient(base, 'chat', { fetchImpl });

test('MCP at the stable URL: the tools are the graphs, a call runs one', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { fetch: edgeFetch() });
  const client = new Client({ name: 'slipway-test', version: '1.0.0' });
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((tool) => tool.name).sort();
  assert.deepEqual(tools, ['agent', 'chat']);
  const result = await client.callTool({ name: 'agent', arguments: { text: 'count words' } });
  assert.equal((result.structuredContent as { answer: string }).answer, 'Analysis: 2 words.');
  await transport.terminateSession();
});

test('A2A at the stable URL: a conversation continues through the other instance and after a redeploy', async () => {
  const card = (await (await edgeFetch()(`${url}/.well-known/agent-card.json?assistant_id=chat`)).json()) as {
    url: string;
  };
  assert.match(card.url, new RegExp(`^${url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/a2a/[0-9a-f-]{36}$`));

  const client = await a2a(edgeFetch(), url);
  const first = (await client.sendMessage(text('hello'))) as Task;
  assert.equal(textOf(first.status?.message), 'Turn 1: you said "hello"');

  // Each instance by its own port: the second message goes to the other one.
  const slug = new URL(url).hostname.split('.')[0]!;
  const targets = await eventually('two instances', async () => {
    const now = service.edge.targets(slug);
    return now.length === 2 ? now : null;
  });
  let turn = 2;
  for (const target of targets) {
    const direct = await a2a(fetchVia(target.port, new URL(url).host), url);
    let answer = '';
    for await (const event of direct.sendMessageStream(text(`turn ${turn}`, first.contextId)))
      if (
        event.payload?.$case === 'statusUpdate' &&
        event.payload.value.status?.state === TaskState.TASK_STATE_COMPLETED
      )
        answer = textOf(event.payload.value.status.message);
    assert.equal(answer, `Turn ${turn}: you said "turn ${turn}"`);
    turn += 1;
  }

  // A redeploy (a new secret makes a new revision): the same context goes on.
  const patched = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
    secrets: [{ name: 'REPLY_PREFIX', value: 'Redeployed' }],
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  const revision = await waitForRevision(
    service,
    deploymentId,
    patched.body.latest_revision_id,
    undefined,
    10 * 60_000,
  );
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const after = await a2a(edgeFetch(), url);
  const next = (await after.sendMessage(text('still there?', first.contextId))) as Task;
  assert.equal(textOf(next.status?.message), `Turn ${turn}: you said "still there?"`);
  // The first task, read through the new revision.
  assert.equal((await after.getTask({ tenant: '', id: first.id })).status?.state, TaskState.TASK_STATE_COMPLETED);
});
