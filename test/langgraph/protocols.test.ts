/**
 * MCP and A2A on a LangGraph deployment's server (runtime/langgraph/mcp.mjs, a2a.mjs), with the
 * official clients: @modelcontextprotocol/sdk's Client over its Streamable HTTP transport, and
 * @a2a-js/sdk's client in its default protocol (v1.0) and its v0.3 compatibility mode.
 *
 * The launcher runs as the data plane starts it, without the data plane: two instances of one project
 * on one database (as two instances of a deployment, or an old and a new revision during a redeploy),
 * and a third of the same project with custom auth on a database of its own (and
 * SLIPWAY_PROTOCOLS_AUTH=credential, which its custom auth overrides). A fourth requires a protocol
 * credential (SLIPWAY_PROTOCOLS_AUTH=credential) and checks it with a real Slipway API on loopback, as a
 * deployment's server does with its agent credential. The project is examples/langgraph-js with a chat
 * graph (test/fixtures/langgraph-protocols/chat.mjs) beside its agent.
 *
 * The install (test/support/langgraph-example.ts) takes a minute or so, once per run of the suite.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  discoverOAuthProtectedResourceMetadata,
  extractResourceMetadataUrl,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { TaskState, type Task } from '@a2a-js/sdk';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { ADMIN_KEY, client as apiClient, createTestApp, createTestDatabase, listen, newWorkspace } from '../helpers.ts';
import type { TestApp, TestDatabase } from '../helpers.ts';
import { createDeployment } from '../oauth/oauth-test-app.ts';
import { a2aClient, text, textOf } from './a2a-clients.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { langgraphExampleProject } from '../support/langgraph-example.ts';

const run = promisify(execFile);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIXTURE = path.resolve(HERE, '../fixtures/langgraph-protocols');
const ALICE = { authorization: 'Bearer let-me-in' };
const BOB = { authorization: 'Bearer let-me-in-too' };

let project: string;
/** What the file removes at its end beside the project (test/support/made-once.ts). */
const scratch: string[] = [];
let shared: TestDatabase;
let guarded: TestDatabase;
const started: ChildProcess[] = [];
let first: string;
let second: string;
let withAuth: string;
let fenced: TestDatabase;
let withCredential: string;
let slipway: TestApp;
/** Protocol credentials: the fenced deployment's own, another deployment's, another workspace's. */
const credentials = { own: '', ownId: '', fencedId: '', sibling: '', foreign: '', agent: '' };

async function startServer(config: string, databaseUrl: string, env: Record<string, string> = {}): Promise<string> {
  const port = await freePort();
  const child = spawn(process.execPath, ['.slipway/langgraph-server.mjs', 'js', config], {
    cwd: project,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: project,
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      ...env,
    },
    detached: true,
  });
  started.push(child);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  await eventually(
    'the server to answer /ok',
    async () => {
      if (child.exitCode !== null) throw new Error(`the launcher exited with ${child.exitCode}:\n${output}`);
      // With custom auth, /ok too wants the credential: any answer means the server is up.
      return fetch(`${url}/ok`)
        .then((response) => response.status < 500)
        .catch(() => false);
    },
    { seconds: 180 },
  );
  return url;
}

before(async () => {
  project = await langgraphExampleProject('slipway-langgraph-protocols-', scratch);
  for (const name of ['chat.mjs', 'auth.mjs']) await fs.cp(path.join(FIXTURE, name), path.join(project, 'src', name));
  await fs.cp(path.join(FIXTURE, 'use-tools.mjs'), path.join(project, 'use-tools.mjs'));
  for (const name of ['langgraph.json', 'langgraph-auth.json'])
    await fs.cp(path.join(FIXTURE, name), path.join(project, name));
  const npm = { cwd: project, timeout: 300_000 };
  // The build's last step: the graphs' schemas, which MCP's tool list and A2A's skills are made from.
  await run(process.execPath, ['.slipway/langgraph-server.mjs', 'schemas', 'langgraph.json'], npm);
  [shared, guarded, fenced] = await Promise.all([createTestDatabase(), createTestDatabase(), createTestDatabase()]);
  // Slipway, which the fenced server asks about the credentials it is sent.
  slipway = await createTestApp();
  const slipwayUrl = await listen(slipway.app);
  const api = apiClient(slipway.app);
  const mint = async (as: typeof api, deploymentId: string, kind: 'protocol' | 'agent') => {
    const made = await as.post(
      `/v2/deployments/${deploymentId}/${kind}-credentials`,
      kind === 'agent' ? { agent_ids: ['fenced'] } : {},
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body as { id: string; credential: string };
  };
  credentials.fencedId = await createDeployment(api, 'fenced');
  const own = await mint(api, credentials.fencedId, 'protocol');
  credentials.own = own.credential;
  credentials.ownId = own.id;
  credentials.agent = (await mint(api, credentials.fencedId, 'agent')).credential;
  credentials.sibling = (await mint(api, await createDeployment(api, 'sibling'), 'protocol')).credential;
  const other = await newWorkspace(slipway, 'other-team');
  credentials.foreign = (await mint(other.api, await createDeployment(other.api, 'fenced'), 'protocol')).credential;
  first = await startServer('langgraph.json', shared.url);
  second = await startServer('langgraph.json', shared.url);
  withAuth = await startServer('langgraph-auth.json', guarded.url, { SLIPWAY_PROTOCOLS_AUTH: 'credential' });
  withCredential = await startServer('langgraph.json', fenced.url, {
    SLIPWAY_PROTOCOLS_AUTH: 'credential',
    SLIPWAY_API_URL: slipwayUrl,
    SLIPWAY_AGENT_CREDENTIAL: credentials.agent,
  });
});

after(async () => {
  for (const child of started) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  await shared?.drop();
  await guarded?.drop();
  await fenced?.drop();
  await slipway?.close();
  await fs.rm(project, { recursive: true, force: true });
  for (const dir of scratch) await fs.rm(dir, { recursive: true, force: true });
});

async function mcpClient(base: string, options: { headers?: Record<string, string>; sessionId?: string } = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: options.headers ?? {} },
    ...(options.sessionId ? { sessionId: options.sessionId } : {}),
  });
  const client = new Client({ name: 'slipway-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

/** Runs on the deployment's database, counted the way a user would see them: rows of langgraph.runs. */
async function runCount(database: TestDatabase): Promise<number> {
  const { rows } = await database.pool.query<{ n: string }>('select count(*) as n from langgraph.runs');
  return Number(rows[0]!.n);
}

describe('MCP', () => {
  test('every assistant is a tool with its graph input schema, and a call runs the graph with progress', async () => {
    const { client, transport } = await mcpClient(first);
    assert.match(transport.sessionId ?? '', /^[0-9a-f-]{36}$/, 'initialize opens a session');
    // The schema is compiled in a worker once per instance: the listing has it once that is done.
    const tools = await eventually(
      'the agent tool to have its input schema',
      async () => {
        const listed = (await client.listTools()).tools;
        const agent = listed.find((tool) => tool.name === 'agent');
        return agent?.inputSchema.properties && 'text' in agent.inputSchema.properties ? listed : null;
      },
      { seconds: 240 },
    );
    assert.deepEqual(tools.map((tool) => tool.name).sort(), ['agent', 'chat']);

    const progress: string[] = [];
    const result = await client.callTool(
      { name: 'agent', arguments: { text: 'How many words are here? And the longest one?' } },
      undefined,
      { onprogress: (p) => progress.push(p.message ?? '') },
    );
    assert.equal(result.isError, undefined);
    const output = result.structuredContent as { answer: string; findings: string[] };
    assert.equal(output.answer, 'Analysis: 9 words; the longest word is "longest".');
    assert.deepEqual(progress, ['planner done', 'analyst done', 'analyst done', 'writer done']);
    assert.ok(result._meta?.thread_id, 'the result names the thread it ran on');

    // A graph's error is a tool error, not a protocol error.
    const failed = await client.callTool({ name: 'agent', arguments: {} });
    assert.equal(failed.isError, true);
    assert.match(JSON.stringify(failed.content), /The input needs a \\"text\\" to analyse/);
    // An unknown tool is a JSON-RPC error.
    await assert.rejects(client.callTool({ name: 'no-such-tool', arguments: {} }), /Unknown tool: no-such-tool/);
    await client.close();
  });

  test('a call continues a thread it is given; a session opened on one instance is served by the other until it is deleted', async () => {
    const { client, transport } = await mcpClient(first);
    const one = await client.callTool({ name: 'chat', arguments: { messages: [{ role: 'user', content: 'hi' }] } });
    const threadId = one._meta?.thread_id as string;
    const sessionId = transport.sessionId!;

    const other = await mcpClient(second, { sessionId });
    const two = await other.client.callTool({
      name: 'chat',
      arguments: { messages: [{ role: 'user', content: 'and again' }] },
      _meta: { thread_id: threadId },
    });
    assert.equal(two._meta?.thread_id, threadId);
    const messages = (two.structuredContent as { messages: { content: string }[] }).messages;
    assert.equal(messages.at(-1)!.content, 'Turn 2: you said "and again"');

    await transport.terminateSession();
    const after = await fetch(`${second}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    });
    assert.equal(after.status, 404, 'a deleted session is gone on every instance');
  });

  test('attacker: a body that is not JSON, not JSON-RPC or too large gets a JSON-RPC error, never a 500, and runs nothing', async () => {
    const runsBefore = await runCount(shared);
    const post = (body: string, headers: Record<string, string> = {}) =>
      fetch(`${first}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body,
      });
    for (const [body, status, code] of [
      ['{"jsonrpc": "2.0", "id": 1, "method": "tools/call"', 400, -32700],
      ['["not", "json-rpc"]', 400, undefined],
      ['{"hello": "world"}', 400, undefined],
      [' '.repeat(5 * 1024 * 1024), 413, undefined],
    ] as const) {
      const response = await post(body);
      assert.equal(response.status, status, String(body).slice(0, 40));
      const answer = (await response.json()) as { jsonrpc: string; error: { code: number } };
      assert.equal(answer.jsonrpc, '2.0');
      if (code !== undefined) assert.equal(answer.error.code, code);
    }
    // A tools/call without a session (and without initialize) is refused before anything runs.
    const sessionless = await post(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'agent', arguments: { text: 'x' } },
      }),
    );
    assert.equal(sessionless.status, 400);
    const unknown = await post(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }), {
      'mcp-session-id': randomUUID(),
    });
    assert.equal(unknown.status, 404);
    assert.equal(await runCount(shared), runsBefore);
  });

  test("custom auth: LangGraph Studio's x-auth-scheme header opens nothing (no proxy here vouches for a Studio user)", async () => {
    const runsBefore = await runCount(guarded);
    // What the data plane health-checks a project with custom auth on answers without a credential.
    assert.equal((await fetch(`${withAuth}/ok`)).status, 401);
    assert.equal((await fetch(`${withAuth}/info`)).status, 200);
    const studio = { 'content-type': 'application/json', 'x-auth-scheme': 'langsmith' };
    const threads = await fetch(`${withAuth}/threads/search`, { method: 'POST', headers: studio, body: '{}' });
    assert.equal(threads.status, 401, await threads.text());
    const run = await fetch(`${withAuth}/runs/wait`, {
      method: 'POST',
      headers: studio,
      body: JSON.stringify({ assistant_id: 'agent', input: { text: 'x' } }),
    });
    assert.equal(run.status, 401, await run.text());
    const mcp = await fetch(`${withAuth}/mcp`, {
      method: 'POST',
      headers: { ...studio, accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'agent', arguments: { text: 'x' } },
      }),
    });
    assert.equal(mcp.status, 401, await mcp.text());
    assert.equal(await runCount(guarded), runsBefore);
  });

  test('custom auth: a call without the credential gets 401 and runs nothing; each user has its own threads', async () => {
    const runsBefore = await runCount(guarded);
    await assert.rejects(mcpClient(withAuth), (error: { code?: number }) => error.code === 401);
    const raw = await fetch(`${withAuth}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'agent', arguments: { text: 'x' } },
      }),
    });
    assert.equal(raw.status, 401);
    assert.equal(await runCount(guarded), runsBefore);

    const alice = await mcpClient(withAuth, { headers: ALICE });
    const mine = await alice.client.callTool({ name: 'agent', arguments: { text: 'count words' } });
    assert.equal((mine.structuredContent as { answer: string }).answer, 'Analysis: 2 words.');
    // Bob, with alice's session id and her thread, gets neither her thread nor a run on it.
    const bob = await mcpClient(withAuth, { headers: BOB, sessionId: alice.transport.sessionId! });
    const theirs = await bob.client.callTool({
      name: 'agent',
      arguments: { text: 'count words' },
      _meta: { thread_id: mine._meta?.thread_id },
    });
    assert.equal(theirs.isError, true);
    const { rows } = await guarded.pool.query<{ n: string }>(
      'select count(*) as n from langgraph.runs where thread_id = $1',
      [mine._meta?.thread_id],
    );
    assert.equal(Number(rows[0]!.n), 1, "bob's call ran nothing on alice's thread");
  });
});

function withHeaders(headers: Record<string, string>): typeof fetch {
  return (input, init) => {
    const merged = new Headers(init?.headers);
    for (const [name, value] of Object.entries(headers)) merged.set(name, value);
    return fetch(input, { ...init, headers: merged });
  };
}

/** A client of the assistant's card, sending `headers` with every request. */
const a2aAs = (base: string, assistant: string, options: { legacy?: boolean; headers?: Record<string, string> } = {}) =>
  a2aClient(base, assistant, { legacy: options.legacy, fetchImpl: withHeaders(options.headers ?? {}) });

describe('A2A', () => {
  test('the card, a message, and a streamed message in the same context through the other instance (v1.0)', async () => {
    const card = (await (
      await fetch(`${first}/.well-known/agent-card.json?assistant_id=chat`, { headers: { 'A2A-Version': '1.0' } })
    ).json()) as {
      name: string;
      supportedInterfaces: { url: string; protocolVersion: string }[];
      skills: { id: string }[];
    };
    assert.equal(card.name, 'chat');
    assert.deepEqual(
      card.skills.map((skill) => skill.id),
      ['chat'],
    );
    assert.deepEqual(
      card.supportedInterfaces.map((i) => i.protocolVersion),
      ['1.0', '0.3'],
    );
    assert.match(card.supportedInterfaces[0]!.url, /\/a2a\/[0-9a-f-]{36}$/);

    const client = await a2aClient(first, 'chat');
    const task = (await client.sendMessage(text('hello'))) as Task;
    assert.equal(task.status?.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(textOf(task.status?.message), 'Turn 1: you said "hello"');

    const other = await a2aClient(second, 'chat');
    const states: TaskState[] = [];
    let answer = '';
    for await (const event of other.sendMessageStream(text('and now?', task.contextId))) {
      if (event.payload?.$case === 'statusUpdate') {
        states.push(event.payload.value.status!.state);
        answer = textOf(event.payload.value.status?.message);
      }
    }
    assert.equal(states.at(-1), TaskState.TASK_STATE_COMPLETED);
    assert.equal(answer, 'Turn 2: you said "and now?"', 'the context is the thread: the second message is turn 2');

    // tasks/get through either instance.
    const fetched = await client.getTask({ tenant: '', id: task.id });
    assert.equal(fetched.status?.state, TaskState.TASK_STATE_COMPLETED);
  });

  test('v0.3 clients: the card, message/send, message/stream and a data part for a graph without messages', async () => {
    const client = await a2aClient(second, 'chat', { legacy: true });
    const task = (await client.sendMessage(text('old protocol'))) as Task;
    assert.equal(textOf(task.status?.message), 'Turn 1: you said "old protocol"');
    const card = (await (await fetch(`${second}/.well-known/agent-card.json?assistant_id=agent`)).json()) as {
      protocolVersion: string;
      url: string;
    };
    assert.equal(card.protocolVersion, '0.3.0');

    const agent = await a2aClient(first, 'agent', { legacy: true });
    const request = text('');
    request.message!.parts = [
      {
        content: { $case: 'data', value: { text: 'count words' } },
        mediaType: 'application/json',
        filename: '',
        metadata: {},
      },
    ];
    let output: unknown;
    for await (const event of agent.sendMessageStream(request))
      if (event.payload?.$case === 'artifactUpdate') output = event.payload.value.artifact?.parts[0]?.content;
    assert.deepEqual((output as { $case: string; value: { answer: string } }).value.answer, 'Analysis: 2 words.');
  });

  test('a task cancelled through the other instance stops its run', async () => {
    const client = await a2aClient(first, 'chat');
    const request = text('be slow');
    request.configuration = { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true };
    const task = (await client.sendMessage(request)) as Task;
    const threadId = task.contextId;
    await eventually(
      'the run to start',
      async () =>
        (
          await shared.pool.query("select 1 from langgraph.runs where thread_id = $1 and status = 'running'", [
            threadId,
          ])
        ).rowCount === 1,
    );
    const other = await a2aClient(second, 'chat');
    const cancelled = await other.cancelTask({ tenant: '', id: task.id, metadata: {} });
    assert.equal(cancelled.status?.state, TaskState.TASK_STATE_CANCELED);
    await eventually(
      'the run to stop',
      async () =>
        (
          await shared.pool.query(
            "select 1 from langgraph.runs where thread_id = $1 and status in ('running', 'pending')",
            [threadId],
          )
        ).rowCount === 0,
    );
    assert.equal((await client.getTask({ tenant: '', id: task.id })).status?.state, TaskState.TASK_STATE_CANCELED);
  });

  test('attacker: malformed JSON-RPC, huge bodies and unknown assistants get JSON-RPC errors, never a 500, and run nothing', async () => {
    const runsBefore = await runCount(shared);
    const post = (url: string, body: string) =>
      fetch(`${first}${url}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    for (const [body, status, code] of [
      ['{"jsonrpc": "2.0", "method": "message/send"', 400, -32700],
      ['[1, 2, 3]', 400, -32600],
      ['{"method": "message/send", "params": {}}', 400, -32600],
      [' '.repeat(5 * 1024 * 1024), 413, -32600],
    ] as const) {
      const response = await post('/a2a/chat', body);
      assert.equal(response.status, status);
      assert.equal(((await response.json()) as { error: { code: number } }).error.code, code);
    }
    const wrongParams = await post(
      '/a2a/chat',
      JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: 'x' }),
    );
    assert.ok(wrongParams.status < 500);
    const unknown = await post(
      '/a2a/nope',
      JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: {} }),
    );
    assert.equal(unknown.status, 404);
    assert.equal((await fetch(`${first}/.well-known/agent-card.json?assistant_id=nope`)).status, 404);
    assert.equal(await runCount(shared), runsBefore);
  });

  test('custom auth: a message without the credential gets 401 and runs nothing; another user cannot read or cancel the task', async () => {
    const runsBefore = await runCount(guarded);
    await assert.rejects(a2aClient(withAuth, 'chat'), /401/);
    const raw = await fetch(`${withAuth}/a2a/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'message/send',
        params: { message: { kind: 'message', messageId: 'm', role: 'user', parts: [{ kind: 'text', text: 'hi' }] } },
      }),
    });
    assert.equal(raw.status, 401);
    assert.equal(await runCount(guarded), runsBefore);

    const alice = await a2aAs(withAuth, 'chat', { headers: ALICE });
    const task = (await alice.sendMessage(text('secret'))) as Task;
    assert.equal(textOf(task.status?.message), 'Turn 1: you said "secret"');
    const bob = await a2aAs(withAuth, 'chat', { headers: BOB });
    await assert.rejects(bob.getTask({ tenant: '', id: task.id }), /not found/i);
    await assert.rejects(bob.cancelTask({ tenant: '', id: task.id, metadata: {} }), /not found/i);
    // Nor can bob write into alice's conversation by naming her context.
    await assert.rejects(bob.sendMessage(text('me too', task.contextId)));
    const { rows } = await guarded.pool.query<{ n: string }>(
      'select count(*) as n from langgraph.runs where thread_id = $1',
      [task.contextId],
    );
    assert.equal(Number(rows[0]!.n), 1);
  });
});

describe('MCP tools in another graph', () => {
  test("LangChain's @langchain/mcp-adapters loads a deployment's graphs as tools, and another graph calls one", async () => {
    const { stdout } = await run(process.execPath, ['use-tools.mjs'], {
      cwd: project,
      timeout: 120_000,
      env: { PATH: process.env.PATH ?? '', HOME: project, MCP_URL: `${first}/mcp` },
    });
    const got = JSON.parse(stdout.trim().split('\n').at(-1)!) as { tools: string[]; answer: string };
    assert.ok(
      got.tools.some((name) => /(^|__)agent$/.test(name)) && got.tools.some((name) => /(^|__)chat$/.test(name)),
      `the deployment's graphs as tools: ${got.tools.join(', ')}`,
    );
    // The deployed agent's own answer (its REPLY_PREFIX from langgraph.json), through the other graph.
    assert.match(got.answer, /Analysis: 7 words/);
  });
});

describe('SLIPWAY_PROTOCOLS_AUTH=credential', () => {
  const OWN = () => ({ authorization: `Bearer ${credentials.own}` });
  const call = (base: string, path: string, headers: Record<string, string>, body: unknown) =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify(body),
    });
  const toolCall = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'chat', arguments: {} } };
  const message = {
    jsonrpc: '2.0',
    id: 1,
    method: 'message/send',
    params: { message: { kind: 'message', messageId: 'm', role: 'user', parts: [{ kind: 'text', text: 'hi' }] } },
  };

  test("no credential, a wrong one, another deployment's or workspace's, an API key or an agent credential: 401, nothing runs", async () => {
    const runsBefore = await runCount(fenced);
    const refused: [string, Record<string, string>][] = [
      ['no credential', {}],
      ['a made-up one', { authorization: `Bearer slwp_${'A'.repeat(43)}` }],
      ['a credential of another deployment', { authorization: `Bearer ${credentials.sibling}` }],
      [
        "a credential of another workspace's deployment of the same name",
        { authorization: `Bearer ${credentials.foreign}` },
      ],
      ['an API key as a bearer', { authorization: `Bearer ${ADMIN_KEY}` }],
      ['an API key as X-Api-Key', { 'x-api-key': ADMIN_KEY }],
      ["the deployment's agent credential", { authorization: `Bearer ${credentials.agent}` }],
      ['the right one in another header', { 'x-api-key': credentials.own }],
    ];
    for (const [what, headers] of refused) {
      assert.equal((await call(withCredential, '/mcp', headers, toolCall)).status, 401, `MCP, ${what}`);
      assert.equal((await call(withCredential, '/a2a/chat', headers, message)).status, 401, `A2A, ${what}`);
      const card = await fetch(`${withCredential}/.well-known/agent-card.json?assistant_id=chat`, { headers });
      assert.equal(card.status, 401, `agent card, ${what}`);
    }
    await assert.rejects(mcpClient(withCredential), (error: { code?: number }) => error.code === 401);
    await assert.rejects(
      mcpClient(withCredential, { headers: { authorization: `Bearer ${credentials.sibling}` } }),
      (error: { code?: number }) => error.code === 401,
    );
    await assert.rejects(a2aClient(withCredential, 'chat'), /401/);
    // A session opened with the credential is no way in without it.
    const { transport } = await mcpClient(withCredential, { headers: OWN() });
    const hijack = await call(withCredential, '/mcp', { 'mcp-session-id': transport.sessionId! }, toolCall);
    assert.equal(hijack.status, 401);
    assert.equal(await runCount(fenced), runsBefore);
  });

  test('a refused MCP client learns where to authenticate: WWW-Authenticate resource_metadata and RFC 9728 metadata', async () => {
    const refused = await call(withCredential, '/mcp', {}, toolCall);
    assert.equal(refused.status, 401);
    assert.match(refused.headers.get('www-authenticate') ?? '', /^Bearer resource_metadata="/);
    const where = extractResourceMetadataUrl(refused);
    assert.equal(where?.href, `${withCredential}/.well-known/oauth-protected-resource/mcp`);
    // The MCP SDK's own discovery reads it as a client does.
    const metadata = await discoverOAuthProtectedResourceMetadata(new URL(`${withCredential}/mcp`), {
      resourceMetadataUrl: where,
    });
    assert.equal(metadata.resource, `${withCredential}/mcp`);
    assert.deepEqual(metadata.bearer_methods_supported, ['header']);
    assert.equal(metadata.authorization_servers?.length, 1);
    // A wrong credential says so (RFC 6750), with the same pointer.
    const wrong = await call(withCredential, '/mcp', { authorization: `Bearer ${credentials.sibling}` }, toolCall);
    assert.match(wrong.headers.get('www-authenticate') ?? '', /error="invalid_token"/);
    // The servers without the requirement serve no such document.
    assert.equal((await fetch(`${first}/.well-known/oauth-protected-resource/mcp`)).status, 404);
  });

  test("the deployment's own credential works through the official clients, until it is revoked", async () => {
    const { client } = await mcpClient(withCredential, { headers: OWN() });
    assert.ok((await client.listTools()).tools.some((tool) => tool.name === 'chat'));
    const result = await client.callTool({ name: 'chat', arguments: { messages: [{ role: 'user', content: 'hi' }] } });
    const messages = (result.structuredContent as { messages: { content: string }[] }).messages;
    assert.equal(messages.at(-1)!.content, 'Turn 1: you said "hi"');
    await client.close();

    const a2a = await a2aAs(withCredential, 'chat', { headers: OWN() });
    const task = (await a2a.sendMessage(text('hello'))) as Task;
    assert.equal(task.status?.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(textOf(task.status?.message), 'Turn 1: you said "hello"');

    const revoked = await apiClient(slipway.app).delete(
      `/v2/deployments/${credentials.fencedId}/protocol-credentials/${credentials.ownId}`,
    );
    assert.equal(revoked.status, 204);
    // The server keeps a yes for 10 seconds at most (asked here through the card, which runs nothing).
    await eventually(
      'the revoked credential to be refused',
      async () =>
        (await fetch(`${withCredential}/.well-known/agent-card.json?assistant_id=chat`, { headers: OWN() })).status ===
        401,
      { seconds: 60 },
    );
    const runsBefore = await runCount(fenced);
    assert.equal((await call(withCredential, '/a2a/chat', OWN(), message)).status, 401);
    assert.equal((await call(withCredential, '/mcp', OWN(), toolCall)).status, 401);
    assert.equal(await runCount(fenced), runsBefore);
  });
});
