// MCP and A2A on every LangGraph deployment (docs/langgraph.md, "MCP and A2A"): what both share.
//
// Both protocols are served by the launcher's custom `http` app (after the server's custom auth, like
// the cron routes) and run graphs through the server's own LangGraph API, in process (its loopback
// fetch), with the caller's headers: the project's custom `auth` decides for an MCP tool call or an A2A
// message exactly as for `/threads` and `/runs`, and the runs, threads and their state are the ones the
// rest of the API serves (in the deployment's PostgreSQL, so any instance continues a conversation).
//
// The protocols' own packages (@modelcontextprotocol/sdk, @a2a-js/sdk) are the project's: the build adds
// pinned releases beside the config when the project does not bring them (src/domain/langgraph-config.ts).
// Without them the server starts as before, without /mcp and /a2a, and says so in the log.
import { createRequire } from 'node:module';
import path from 'node:path';
import { esmEntry, packageDir } from './packages.mjs';

/** The largest request body /mcp and /a2a read (as the MCP SDK's own default): larger is 413. */
export const BODY_LIMIT = 4 * 1024 * 1024;

/** Headers that belong to the protocol request itself, not to the caller's identity. */
const NOT_FORWARDED = new Set([
  'host',
  'content-length',
  'content-type',
  'accept',
  'accept-encoding',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
  'last-event-id',
  'mcp-session-id',
  'mcp-protocol-version',
  'a2a-version',
  'a2a-extensions',
  'x-a2a-extensions',
]);

/** The caller's headers (credentials, cookies, custom ones a custom `auth` reads) for the API calls it makes. */
export function callerHeaders(headers) {
  const kept = {};
  const entries = headers instanceof Headers ? headers.entries() : Object.entries(headers);
  for (const [name, value] of entries)
    if (typeof value === 'string' && !NOT_FORWARDED.has(name.toLowerCase())) kept[name] = value;
  return kept;
}

/** The address the caller reached this server by (the stable URL behind the edge). */
export function origin(request) {
  const url = new URL(request.url);
  const proto = request.headers.get('x-forwarded-proto')?.split(',')[0].trim() || url.protocol.replace(':', '');
  const host = request.headers.get('x-forwarded-host')?.split(',')[0].trim() || request.headers.get('host') || url.host;
  return `${proto}://${host}`;
}

/** Reads a request body of at most BODY_LIMIT bytes: the text, or null when it is larger. */
export async function readBody(request) {
  const declared = Number(request.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > BODY_LIMIT) return null;
  if (!request.body) return '';
  const reader = request.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > BODY_LIMIT) {
      await reader.cancel().catch(() => undefined);
      return null;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The server-sent events of a response body, as `{event, data}` with `data` parsed from JSON. */
async function* serverSentEvents(body) {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true }).replaceAll('\r\n', '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length === 0) continue;
      let parsed = data.join('\n');
      try {
        parsed = JSON.parse(parsed);
      } catch {
        // Left as text.
      }
      yield { event, data: parsed };
    }
  }
}

/** An error of the LangGraph API, with its status and message, as the protocols report it. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * The server's LangGraph API, called in process as the caller (`headers`): `json(method, path, body)`,
 * `stream(threadId, payload)` (the run's events, with its run id first as `{event: 'run', data: id}`),
 * and the lookups both protocols make.
 */
export function createApi({ loopbackFetch, logger }, headers) {
  async function request(method, url, body) {
    const response = await loopbackFetch(url, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return response;
  }
  async function failure(response) {
    const text = await response.text().catch(() => '');
    let message = text;
    try {
      const parsed = JSON.parse(text);
      message = parsed.message ?? parsed.detail ?? parsed.error ?? text;
    } catch {
      // The body as it is.
    }
    return new ApiError(response.status, typeof message === 'string' ? message : JSON.stringify(message));
  }
  const api = {
    async json(method, url, body) {
      const response = await request(method, url, body);
      if (!response.ok) throw await failure(response);
      const text = await response.text();
      return text ? JSON.parse(text) : null;
    },
    async *stream(threadId, payload) {
      const response = await request('POST', `/threads/${threadId}/runs/stream`, payload);
      if (!response.ok || !response.body) throw await failure(response);
      const location = response.headers.get('content-location') ?? '';
      yield { event: 'run', data: location.split('/').pop() };
      yield* serverSentEvents(response.body);
    },
    /** A thread of the caller: `threadId` (made when it does not exist yet), or a new one. */
    async thread(threadId, metadata) {
      const body = threadId ? { thread_id: threadId, if_exists: 'do_nothing', metadata } : { metadata };
      return (await api.json('POST', '/threads', body)).thread_id;
    },
    /** Stops the runs of a thread that are still going (a cancelled A2A task, an abandoned MCP call). */
    async cancelRuns(threadId) {
      for (const status of ['running', 'pending']) {
        const runs = await api.json('GET', `/threads/${threadId}/runs?status=${status}`).catch(() => []);
        for (const run of runs ?? [])
          await api
            .json('POST', `/threads/${threadId}/runs/${run.run_id}/cancel?action=interrupt`)
            .catch((error) => logger.warn('Could not cancel a run', { run_id: run.run_id, error: error.message }));
      }
    },
  };
  return api;
}

/** How long tools/list and an A2A message wait for a graph's schema before taking any object. */
const SCHEMA_WAIT_MS = 10_000;
export const ANY_OBJECT = { type: 'object', additionalProperties: true };

/**
 * The graph's input schema (as `GET /assistants/{id}/schemas` gives it), kept per graph. LangChain's
 * server extracts a JS graph's schema by compiling its TypeScript in a worker, which takes seconds:
 * `warm` does it for every graph once the server is up, and a caller that comes before it is done
 * waits SCHEMA_WAIT_MS at most, then gets null: not known yet (the next one gets the real schema).
 */
export function createSchemas({ internal, logger }) {
  const byGraph = new Map();
  async function inputSchema(api, assistant) {
    if (!byGraph.has(assistant.graph_id)) {
      const pending = api
        .json('GET', `/assistants/${assistant.assistant_id}/schemas`)
        .then((schemas) => schemas?.input_schema ?? null)
        .catch(() => {
          byGraph.delete(assistant.graph_id);
          return null;
        });
      byGraph.set(assistant.graph_id, pending);
    }
    let timer;
    const late = new Promise((resolve) => {
      timer = setTimeout(resolve, SCHEMA_WAIT_MS, null);
    });
    const schema = await Promise.race([byGraph.get(assistant.graph_id), late]);
    clearTimeout(timer);
    return schema && typeof schema === 'object' && schema.type === 'object' ? schema : null;
  }
  async function warm(graphIds) {
    const { getCachedStaticGraphSchema } = await internal('graph/load.mjs');
    for (const graphId of graphIds)
      await getCachedStaticGraphSchema(graphId).catch((error) =>
        logger.warn(`Could not extract the schema of the graph ${graphId}`, { error: error.message }),
      );
  }
  return { inputSchema, warm };
}

/** Whether a graph's state has a `messages` channel (it then answers with its last AI message). */
export function takesMessages(schema) {
  return Boolean(schema?.properties && Object.hasOwn(schema.properties, 'messages'));
}

/** The text of the last AI message of a state's `messages`, or null when it has none. */
export function lastAiMessage(values) {
  const messages = Array.isArray(values?.messages) ? values.messages : [];
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const message = messages[i];
    const kind = message?.type ?? message?.role ?? message?.kwargs?.type;
    if (kind !== 'ai' && kind !== 'assistant' && message?.id?.at?.(-1) !== 'AIMessage') continue;
    const content = message.content ?? message.kwargs?.content;
    if (typeof content === 'string') return content;
    if (Array.isArray(content))
      return content.map((part) => (typeof part === 'string' ? part : part?.type === 'text' ? part.text : '')).join('');
  }
  return null;
}

/**
 * The protocols' packages, from the project as Node finds them there, or null (with the reason in the
 * log) when the project has neither its own nor the pinned ones.
 */
export async function loadProtocolPackages(projectDir, logger) {
  const fromProject = createRequire(path.join(projectDir, 'package.json'));
  try {
    const mcpDir = packageDir(fromProject, '@modelcontextprotocol/sdk');
    const mcpFile = (file) => import(new URL(`dist/esm/${file}`, `file://${mcpDir}/`).href);
    const a2a = (subpath) => import(esmEntry(fromProject, '@a2a-js/sdk', subpath));
    const [mcpServer, mcpTransport, mcpTypes, a2aRoot, a2aServer, a2aLegacy] = await Promise.all([
      mcpFile('server/index.js'),
      mcpFile('server/webStandardStreamableHttp.js'),
      mcpFile('types.js'),
      a2a('.'),
      a2a('./server'),
      a2a('./compat/v0_3/server'),
    ]);
    return { mcpServer, mcpTransport, mcpTypes, a2aRoot, a2aServer, a2aLegacy };
  } catch (error) {
    logger.warn(
      'MCP and A2A are not served: @modelcontextprotocol/sdk and @a2a-js/sdk could not be loaded from the project',
      { error: error.message },
    );
    return null;
  }
}
