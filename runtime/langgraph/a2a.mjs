// A2A at the paths LangSmith's Agent Server uses (docs/langgraph.md, "MCP and A2A"):
// `POST /a2a/{assistant_id}` (JSON-RPC) and `GET /.well-known/agent-card.json?assistant_id=...`, with
// `{assistant_id}` an assistant's UUID or a graph id.
//
// The A2A SDK's request handler and JSON-RPC handlers do the protocol: v1.0 when the request says
// `A2A-Version: 1.0`, v0.3 (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`) otherwise, as
// the card declares both. A message is a run of the assistant's graph on the thread that is the
// task's `contextId`; a graph with `messages` in its state answers with its last AI message, another
// with its output as a data part.
import { randomUUID } from 'node:crypto';
import { API_STATE_KEY, createTaskStore, threadOf } from './a2a-tasks.mjs';
import { ApiError, callerHeaders, createApi, lastAiMessage, origin, readBody, takesMessages } from './protocols.mjs';

const STATE = { submitted: 1, working: 2, completed: 3, failed: 4, canceled: 5 };
const ROLE_AGENT = 2;

const textPart = (value) => ({
  content: { $case: 'text', value },
  mediaType: 'text/plain',
  filename: '',
  metadata: {},
});
const dataPart = (value) => ({
  content: { $case: 'data', value },
  mediaType: 'application/json',
  filename: '',
  metadata: {},
});

function agentMessage(taskId, contextId, parts) {
  return {
    role: ROLE_AGENT,
    messageId: randomUUID(),
    taskId,
    contextId,
    parts,
    metadata: {},
    extensions: [],
    referenceTaskIds: [],
  };
}

/**
 * The graph's input for a message: a data part as it is; else its text as a user message (a graph with
 * `messages`, or one whose schema is not known yet), or as a JSON object (another graph).
 */
function inputOf(message, schema) {
  const parts = message?.parts ?? [];
  const data = parts.find((part) => part.content?.$case === 'data')?.content.value;
  if (data && typeof data === 'object' && !Array.isArray(data)) return data;
  const text = parts
    .filter((part) => part.content?.$case === 'text')
    .map((part) => part.content.value)
    .join('\n');
  if (!schema || takesMessages(schema)) return { messages: [{ role: 'user', content: text }] };
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed;
  } catch {
    // Not JSON.
  }
  return null;
}

export function createA2a(ctx, packages, inputSchema) {
  const { pool, logger, loopbackFetch } = ctx;
  const { AgentEvent, DefaultRequestHandler, DefaultExecutionEventBusManager, JsonRpcTransportHandler } =
    packages.a2aServer;
  const { ServerCallContext, UnauthenticatedUser, validateVersion } = packages.a2aServer;
  const { LegacyJsonRpcTransportHandler } = packages.a2aLegacy;
  const { Task, AgentCard, formatSSEEvent, SSE_HEADERS, A2A_VERSION_HEADER } = packages.a2aRoot;
  const taskStore = createTaskStore({ pool, Task, logger });
  const buses = new DefaultExecutionEventBusManager();
  /** Tasks this instance executes: their thread, and whether they were cancelled. */
  const executing = new Map();

  const now = () => new Date().toISOString();
  const status = (bus, taskId, contextId, state, parts) =>
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state, message: parts ? agentMessage(taskId, contextId, parts) : undefined, timestamp: now() },
        metadata: {},
      }),
    );

  function executorFor(assistant, schema) {
    return {
      async execute(request, bus) {
        const { taskId, contextId } = request;
        const api = request.context.state.get(API_STATE_KEY);
        const threadId = threadOf(contextId);
        // The thread first: a task is visible only to whom its thread is.
        await api.thread(threadId, { source: 'a2a' });
        if (!request.task)
          bus.publish(
            AgentEvent.task({
              id: taskId,
              contextId,
              status: { state: STATE.submitted, message: undefined, timestamp: now() },
              history: [request.userMessage],
              artifacts: [],
              metadata: { assistant_id: assistant.assistant_id, thread_id: threadOf(contextId) },
            }),
          );
        const input = inputOf(request.userMessage, schema);
        if (!input) {
          const wanted = JSON.stringify(schema);
          status(bus, taskId, contextId, STATE.failed, [
            textPart(`This agent takes a data part (a JSON object) or a JSON text matching ${wanted}`),
          ]);
          return bus.finished();
        }
        const entry = { threadId, contextId, api, cancelled: false };
        executing.set(taskId, entry);
        let output = null;
        let failure = null;
        try {
          status(bus, taskId, contextId, STATE.working);
          const events = api.stream(threadId, {
            assistant_id: assistant.assistant_id,
            input,
            stream_mode: ['updates', 'values'],
            multitask_strategy: 'enqueue',
          });
          for await (const { event, data } of events) {
            if (entry.cancelled) break;
            if (event === 'values') output = data;
            else if (event === 'error') failure = data?.message ?? data?.error ?? 'The run failed';
            else if (event === 'updates' && data && typeof data === 'object')
              status(bus, taskId, contextId, STATE.working, [textPart(`${Object.keys(data).join(', ')} done`)]);
          }
        } catch (error) {
          failure = error instanceof ApiError ? `${error.status}: ${error.message}` : error.message;
        } finally {
          executing.delete(taskId);
        }
        if (entry.cancelled) return;
        const stored = await taskStore.load(taskId, request.context).catch(() => undefined);
        if (stored?.status?.state === STATE.canceled) {
          // Cancelled through another instance while this one ran it.
          status(bus, taskId, contextId, STATE.canceled);
        } else if (failure) {
          status(bus, taskId, contextId, STATE.failed, [textPart(String(failure))]);
        } else {
          const answer = lastAiMessage(output);
          const parts = [answer !== null ? textPart(answer) : dataPart(output ?? {})];
          bus.publish(
            AgentEvent.artifactUpdate({
              taskId,
              contextId,
              artifact: {
                artifactId: randomUUID(),
                name: 'output',
                description: '',
                parts,
                metadata: {},
                extensions: [],
              },
              append: false,
              lastChunk: true,
              metadata: {},
            }),
          );
          status(bus, taskId, contextId, STATE.completed, parts);
        }
        bus.finished();
      },
      async cancelTask(taskId, bus) {
        const entry = executing.get(taskId);
        if (entry) {
          entry.cancelled = true;
          await entry.api.cancelRuns(entry.threadId);
        }
        status(bus, taskId, entry?.contextId ?? '', STATE.canceled);
        bus.finished();
      },
    };
  }

  function cardOf(assistant, url) {
    const modes = ['text/plain', 'application/json'];
    return {
      name: assistant.name || assistant.graph_id,
      description: assistant.description || `The LangGraph graph "${assistant.graph_id}"`,
      supportedInterfaces: [
        { url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
        { url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '0.3' },
      ],
      provider: undefined,
      version: String(assistant.version ?? 1),
      capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
      securitySchemes: {},
      securityRequirements: [],
      defaultInputModes: modes,
      defaultOutputModes: modes,
      skills: [
        {
          id: assistant.graph_id,
          name: assistant.name || assistant.graph_id,
          description: assistant.description || `Runs the graph "${assistant.graph_id}"`,
          tags: ['langgraph'],
          examples: [],
          inputModes: modes,
          outputModes: modes,
          securityRequirements: [],
        },
      ],
      signatures: [],
    };
  }

  /** The card as v0.3 clients read it (the JSON of the v0.3 specification). */
  function legacyCard(card, url) {
    return {
      protocolVersion: '0.3.0',
      name: card.name,
      description: card.description,
      url,
      preferredTransport: 'JSONRPC',
      additionalInterfaces: [{ url, transport: 'JSONRPC' }],
      version: card.version,
      capabilities: { streaming: true, pushNotifications: false, stateTransitionHistory: false },
      defaultInputModes: card.defaultInputModes,
      defaultOutputModes: card.defaultOutputModes,
      skills: card.skills.map(({ id, name, description, tags, examples, inputModes, outputModes }) => ({
        id,
        name,
        description,
        tags,
        examples,
        inputModes,
        outputModes,
      })),
      supportsAuthenticatedExtendedCard: false,
    };
  }

  const isLegacy = (request) => {
    const version = request.headers.get(A2A_VERSION_HEADER) || '0.3';
    return version === '0.3' || version.startsWith('0.3.');
  };

  async function assistantOf(api, assistantId) {
    if (!assistantId) throw new ApiError(422, 'assistant_id is required');
    return api.json('GET', `/assistants/${encodeURIComponent(assistantId)}`);
  }

  const jsonRpcError = (status, code, message) =>
    Response.json({ jsonrpc: '2.0', id: null, error: { code, message } }, { status });
  const httpError = (error) => Response.json({ error: error.message }, { status: error.status ?? 500 });

  async function card(c) {
    const request = c.req.raw;
    const api = createApi({ loopbackFetch, logger }, callerHeaders(request.headers));
    try {
      const assistant = await assistantOf(api, c.req.query('assistant_id'));
      const url = `${origin(request)}/a2a/${assistant.assistant_id}`;
      const full = cardOf(assistant, url);
      const body = isLegacy(request) ? legacyCard(full, url) : AgentCard.toJSON(full);
      return c.json(body, 200, { Vary: A2A_VERSION_HEADER });
    } catch (error) {
      if (error instanceof ApiError) return httpError(error);
      throw error;
    }
  }

  async function rpc(c) {
    const request = c.req.raw;
    const text = await readBody(request);
    if (text === null) return jsonRpcError(413, -32600, 'The request body is too large');
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      return jsonRpcError(400, -32700, 'Parse error: the body is not JSON');
    }
    if (!body || typeof body !== 'object' || Array.isArray(body) || body.jsonrpc !== '2.0')
      return jsonRpcError(400, -32600, 'Invalid Request: not a JSON-RPC 2.0 request');
    const api = createApi({ loopbackFetch, logger }, callerHeaders(request.headers));
    let assistant;
    try {
      assistant = await assistantOf(api, c.req.param('assistant_id'));
    } catch (error) {
      if (error instanceof ApiError)
        return Response.json(
          { jsonrpc: '2.0', id: body.id ?? null, error: { code: -32001, message: error.message } },
          { status: error.status },
        );
      throw error;
    }
    const schema = await inputSchema(api, assistant);
    const card = cardOf(assistant, `${origin(request)}/a2a/${assistant.assistant_id}`);
    const handler = new DefaultRequestHandler(card, taskStore, executorFor(assistant, schema), buses);
    const legacy = isLegacy(request);
    const requestedVersion = request.headers.get(A2A_VERSION_HEADER) || undefined;
    const context = new ServerCallContext({
      user: new UnauthenticatedUser(),
      state: new Map([[API_STATE_KEY, api]]),
      requestedVersion,
    });
    const transport = legacy ? new LegacyJsonRpcTransportHandler(handler) : new JsonRpcTransportHandler(handler);
    const mapError = legacy
      ? LegacyJsonRpcTransportHandler.mapToLegacyJSONRPCError
      : JsonRpcTransportHandler.mapToJSONRPCError;
    let result;
    try {
      validateVersion(context.requestedVersion, card, 'JSONRPC');
      result = await transport.handle(body, context);
    } catch (error) {
      return Response.json({ jsonrpc: '2.0', id: body.id ?? null, error: mapError(error) });
    }
    if (typeof result?.[Symbol.asyncIterator] !== 'function') return Response.json(result);
    const encoder = new TextEncoder();
    const stream = new ReadableStream({
      async start(controller) {
        try {
          for await (const event of result) controller.enqueue(encoder.encode(formatSSEEvent(event)));
        } catch (error) {
          const failure = { jsonrpc: '2.0', id: body.id ?? null, error: mapError(error) };
          controller.enqueue(encoder.encode(formatSSEEvent(failure)));
        }
        controller.close();
      },
    });
    return new Response(stream, { headers: SSE_HEADERS });
  }

  const guarded = (route) => async (c) => {
    try {
      return await route(c);
    } catch (error) {
      logger.warn('A2A request failed', { error: error.message });
      return jsonRpcError(500, -32603, 'Internal error');
    }
  };

  return {
    register(app) {
      app.get('/.well-known/agent-card.json', guarded(card));
      app.post('/a2a/:assistant_id', guarded(rpc));
    },
  };
}
