// MCP at `/mcp` (docs/langgraph.md, "MCP and A2A"): the Streamable HTTP transport of
// @modelcontextprotocol/sdk, one tool per assistant, a call runs the graph to completion.
//
// Sessions as the transport defines them: `initialize` opens one (its id in `Mcp-Session-Id`), every
// later request names it, DELETE ends it. A session lives in langgraph.mcp_sessions, so any instance
// serves a session another instance opened (it replays the `initialize` to a transport of its own) and
// a DELETE through one instance ends it on all (404 afterwards, as for an unknown id).
import { randomUUID } from 'node:crypto';
import { clearInterval, setInterval } from 'node:timers';
import { SCHEMA } from './schema.mjs';
import { ANY_OBJECT, ApiError, callerHeaders, createApi, readBody } from './protocols.mjs';

/** A session unused for this long is dropped from this instance (it stays open: any request revives it). */
const IDLE_MS = 10 * 60 * 1000;
const TOOL_NAME = /[^A-Za-z0-9_.-]/g;

/** Tools named after their assistants (a graph's default assistant has the graph id as its name), each once. */
function toolNames(assistants) {
  const ordered = [...assistants].sort(
    (a, b) =>
      Number(b.metadata?.created_by === 'system') - Number(a.metadata?.created_by === 'system') ||
      String(a.created_at).localeCompare(String(b.created_at)),
  );
  const named = new Map();
  for (const assistant of ordered) {
    const base = (String(assistant.name || assistant.graph_id).replace(TOOL_NAME, '_') || 'assistant').slice(0, 100);
    const name = named.has(base) ? `${base}_${assistant.assistant_id.slice(0, 8)}` : base;
    named.set(name, assistant);
  }
  return named;
}

export function createMcp(ctx, packages, inputSchema) {
  const { pool, logger, loopbackFetch } = ctx;
  const { Server } = packages.mcpServer;
  const { WebStandardStreamableHTTPServerTransport } = packages.mcpTransport;
  const { ListToolsRequestSchema, CallToolRequestSchema, McpError, ErrorCode, isInitializeRequest } = packages.mcpTypes;
  const LATEST = packages.mcpTypes.LATEST_PROTOCOL_VERSION;
  const sessions = new Map();

  const apiFor = (extra) => createApi({ loopbackFetch, logger }, callerHeaders(extra.requestInfo?.headers ?? {}));
  const assistantsOf = async (api) => toolNames(await api.json('POST', '/assistants/search', { limit: 1000 }));

  async function callTool(request, extra) {
    const api = apiFor(extra);
    const assistant = (await assistantsOf(api)).get(request.params.name);
    if (!assistant) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    const given = request.params._meta?.thread_id;
    const progressToken = request.params._meta?.progressToken;
    let threadId = null;
    try {
      threadId = await api.thread(typeof given === 'string' ? given : null, { source: 'mcp' });
      let output = null;
      let runId = null;
      let progress = 0;
      const cancel = () => void api.cancelRuns(threadId);
      extra.signal.addEventListener('abort', cancel, { once: true });
      try {
        const events = api.stream(threadId, {
          assistant_id: assistant.assistant_id,
          input: request.params.arguments ?? {},
          stream_mode: ['updates', 'values'],
        });
        for await (const { event, data } of events) {
          if (event === 'run') runId = data;
          else if (event === 'values') output = data;
          else if (event === 'error') return toolError(data?.message ?? data?.error ?? 'The run failed', threadId);
          else if (event === 'updates' && progressToken !== undefined) {
            progress += 1;
            const node = data && typeof data === 'object' ? Object.keys(data).join(', ') : '';
            await extra
              .sendNotification({
                method: 'notifications/progress',
                params: { progressToken, progress, message: node ? `${node} done` : 'step done' },
              })
              .catch(() => undefined);
          }
          if (extra.signal.aborted) break;
        }
      } finally {
        extra.signal.removeEventListener('abort', cancel);
      }
      const isObject = output !== null && typeof output === 'object' && !Array.isArray(output);
      return {
        content: [{ type: 'text', text: JSON.stringify(output) }],
        ...(isObject ? { structuredContent: output } : {}),
        _meta: { thread_id: threadId, run_id: runId },
      };
    } catch (error) {
      if (error instanceof ApiError) return toolError(`${error.status}: ${error.message}`, threadId);
      throw error;
    }
  }

  function toolError(message, threadId) {
    return { isError: true, content: [{ type: 'text', text: String(message) }], _meta: { thread_id: threadId } };
  }

  function newServer() {
    const server = new Server({ name: 'langgraph', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (_request, extra) => {
      const api = apiFor(extra);
      const named = [...(await assistantsOf(api))];
      const tools = await Promise.all(
        named.map(async ([name, assistant]) => ({
          name,
          title: assistant.name,
          description:
            assistant.description ||
            `Runs the LangGraph graph "${assistant.graph_id}" (assistant ${assistant.assistant_id}) to completion`,
          inputSchema: (await inputSchema(api, assistant)) ?? ANY_OBJECT,
        })),
      );
      return { tools };
    });
    server.setRequestHandler(CallToolRequestSchema, callTool);
    return server;
  }

  /** A transport and server for a session: a new one, or `sessionId` opened before (on any instance). */
  async function openSession(sessionId, protocolVersion) {
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => sessionId ?? randomUUID(),
      onsessioninitialized: async (id) => {
        sessions.set(id, entry);
        if (!sessionId)
          await pool.query(`insert into ${SCHEMA}.mcp_sessions (session_id, protocol_version) values ($1, $2)`, [
            id,
            entry.protocolVersion,
          ]);
      },
      onsessionclosed: async (id) => {
        sessions.delete(id);
        await pool.query(`update ${SCHEMA}.mcp_sessions set closed_at = now() where session_id = $1`, [id]);
      },
    });
    const entry = { transport, server: newServer(), used: Date.now(), protocolVersion: protocolVersion ?? LATEST };
    transport.onerror = () => undefined;
    await entry.server.connect(transport);
    if (sessionId) {
      // The session was opened through another instance (or before this one dropped it): its
      // `initialize` again, answered to no one.
      // Its own id (a client's first request is often 0), and answered in full before the real request.
      const replay = { jsonrpc: '2.0', id: `slipway-replay-${randomUUID()}`, method: 'initialize' };
      replay.params = {
        protocolVersion: entry.protocolVersion,
        capabilities: {},
        clientInfo: { name: 'replay', version: '0' },
      };
      const replayed = await transport.handleRequest(
        new Request('http://localhost/mcp', {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        }),
        { parsedBody: replay },
      );
      await replayed.text();
    }
    return entry;
  }

  const jsonRpcError = (status, code, message) =>
    Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });

  async function handle(request) {
    let parsedBody;
    if (request.method === 'POST') {
      const text = await readBody(request);
      if (text === null) return jsonRpcError(413, -32000, 'The request body is too large');
      try {
        parsedBody = JSON.parse(text);
      } catch {
        return jsonRpcError(400, -32700, 'Parse error: the body is not JSON');
      }
    }
    const sessionId = request.headers.get('mcp-session-id');
    let entry;
    if (sessionId) {
      const { rows } = await pool.query(
        `select protocol_version, closed_at from ${SCHEMA}.mcp_sessions where session_id = $1`,
        [sessionId.slice(0, 200)],
      );
      if (rows.length === 0 || rows[0].closed_at) {
        sessions
          .get(sessionId)
          ?.transport.close()
          .catch(() => undefined);
        sessions.delete(sessionId);
        return jsonRpcError(404, -32001, 'Session not found');
      }
      entry = sessions.get(sessionId) ?? (await openSession(sessionId, rows[0].protocol_version));
    } else {
      const initialize = [parsedBody].flat().find((message) => isInitializeRequest(message));
      entry = await openSession(null, initialize?.params?.protocolVersion ?? null);
    }
    entry.used = Date.now();
    return entry.transport.handleRequest(request, parsedBody === undefined ? {} : { parsedBody });
  }

  const sweep = setInterval(() => {
    for (const [id, entry] of sessions)
      if (Date.now() - entry.used > IDLE_MS) {
        sessions.delete(id);
        entry.transport.close().catch(() => undefined);
      }
  }, 60_000);
  sweep.unref();

  return {
    register(app) {
      app.all('/mcp', async (c) => {
        try {
          return await handle(c.req.raw);
        } catch (error) {
          logger.warn('MCP request failed', { error: error.message });
          return jsonRpcError(500, -32603, 'Internal error');
        }
      });
    },
    stop() {
      clearInterval(sweep);
      for (const entry of sessions.values()) entry.transport.close().catch(() => undefined);
    },
  };
}
