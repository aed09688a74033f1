/**
 * A span for every API request (src/telemetry/tracing.ts): `<METHOD> <route template>`, a child of the
 * caller's span when the request carries a W3C `traceparent`, with the route, the status and, for a 5xx,
 * the error. The handler runs inside the span's context, so what it starts (a revision's pipeline span
 * links to it) and the logs it writes can name the trace. The query string is left out: it can hold an
 * upload token.
 *
 * The caller's trace is joined, but not its sampling decision: a `traceparent` with the sampled flag off
 * would make the parent-based sampler record nothing, so any caller could keep its requests out of the
 * operator's traces. Whether the service records its own work is the operator's to decide.
 */
import {
  context,
  defaultTextMapGetter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Context,
  type Span,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import fastifyPlugin from 'fastify-plugin';
import type { Tracing } from '../telemetry/tracing.ts';

export interface RequestTracingOptions {
  tracing: Tracing;
}

const propagator = new W3CTraceContextPropagator();

/** The caller's context, with its span marked sampled: it names the trace to join, not what to record. */
function callerContext(request: FastifyRequest): Context {
  const extracted = propagator.extract(ROOT_CONTEXT, request.headers, defaultTextMapGetter);
  const remote = trace.getSpanContext(extracted);
  if (remote === undefined || (remote.traceFlags & TraceFlags.SAMPLED) !== 0) return extracted;
  return trace.setSpanContext(extracted, { ...remote, traceFlags: remote.traceFlags | TraceFlags.SAMPLED });
}

const requestTracingPlugin: FastifyPluginAsync<RequestTracingOptions> = async (app, { tracing }) => {
  if (!tracing.enabled) return;
  const spans = new WeakMap<FastifyRequest, Span>();
  app.addHook('onRequest', (request, _reply, done) => {
    const parent = callerContext(request);
    const path = request.url.split('?', 1)[0]!;
    const span = tracing.tracer.startSpan(
      request.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'http.request.method': request.method,
          'url.path': path,
          'url.scheme': request.protocol,
          'client.address': request.ip,
          'user_agent.original': String(request.headers['user-agent'] ?? ''),
        },
      },
      parent,
    );
    spans.set(request, span);
    context.with(trace.setSpan(parent, span), done);
  });
  const finish = (request: FastifyRequest, status: number | null) => {
    const span = spans.get(request);
    if (!span) return;
    spans.delete(request);
    const route = request.routeOptions.url;
    if (route) {
      span.updateName(`${request.method} ${route}`);
      span.setAttribute('http.route', route);
    }
    if (status === null) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: 'the client went away' });
    } else {
      span.setAttribute('http.response.status_code', status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  };
  app.addHook('onError', async (request, _reply, error) => {
    spans.get(request)?.recordException(error);
  });
  app.addHook('onResponse', async (request, reply) => finish(request, reply.statusCode));
  app.addHook('onRequestAbort', async (request) => finish(request, null));
};

/** Register before the routes (the hooks go on the root instance). */
export const requestTracing = fastifyPlugin(requestTracingPlugin, { name: 'slipway-request-tracing' });
