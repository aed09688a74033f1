/**
 * OpenTelemetry traces of the service (docs/operations.md, "Traces"): spans of API requests and of each
 * revision's way through the data plane, exported over OTLP/HTTP to the endpoint the operator sets with
 * the standard OTEL_* variables (read in src/config.ts). Without an endpoint no span is made and nothing
 * is exported: the tracer is OpenTelemetry's no-op one.
 *
 * The provider is the service's own, not registered as the process's global one, so that several services
 * in one process (tests, the bench) keep their spans apart; what is global is only the context manager
 * (AsyncLocalStorage), which carries the current span through awaits and is the same for all.
 */
import { context, createContextKey, SpanStatusCode, trace, type Attributes, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import type { Logger } from 'pino';
import type { TracingConfig } from '../config.ts';
import { SLIPWAY_VERSION as SERVICE_VERSION } from '../version.ts';

export interface Tracing {
  readonly tracer: Tracer;
  /** Whether spans are exported (an endpoint is set). */
  readonly enabled: boolean;
  /** Sends the spans still buffered, then stops; idempotent. */
  shutdown(): Promise<void>;
}

let contextManager: AsyncLocalStorageContextManager | null = null;

/** The process's context manager, set once: spans started inside another's callback become its children. */
function ensureContextManager(): void {
  if (contextManager !== null) return;
  contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
}

export const noTracing: Tracing = Object.freeze({
  tracer: trace.getTracer('slipway-disabled'),
  enabled: false,
  shutdown: async () => undefined,
});

export function startTracing(config: TracingConfig | null, logger: Logger): Tracing {
  if (config === null) return noTracing;
  ensureContextManager();
  const exporter = new OTLPTraceExporter({ url: config.tracesUrl, headers: { ...config.headers } });
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': config.serviceName, 'service.version': SERVICE_VERSION }),
    spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1_000 })],
  });
  logger.info({ traces: config.tracesUrl }, 'traces are exported over OTLP/HTTP');
  let stopping: Promise<void> | null = null;
  return {
    tracer: provider.getTracer('slipway', SERVICE_VERSION),
    enabled: true,
    shutdown: () =>
      (stopping ??= provider.shutdown().catch((error: unknown) => {
        logger.warn({ err: error }, 'traces: the last spans could not be sent');
      })),
  };
}

/** Where a revision's work keeps the tracer of its service, for the steps below it (inSpan). */
const TRACER_KEY = createContextKey('slipway.tracer');

/**
 * Runs `work` in a root span of `tracing`'s service (a revision's way through the data plane); the
 * steps it calls make their spans with inSpan(), without being handed the tracer. Without tracing,
 * just runs it.
 */
export function inRootSpan<T>(
  tracing: Tracing,
  name: string,
  attributes: Attributes,
  work: () => Promise<T>,
): Promise<T> {
  if (!tracing.enabled) return work();
  const start = context.active().setValue(TRACER_KEY, tracing.tracer);
  return context.with(start, () => inSpan(name, attributes, work, { root: true }));
}

/**
 * Runs `work` in a span named `name`, a child of the current one, when a root span of a traced service
 * is current (inRootSpan); otherwise just runs it. A thrown error is recorded and marks the span failed.
 */
export function inSpan<T>(
  name: string,
  attributes: Attributes,
  work: () => Promise<T>,
  options: { root?: boolean } = {},
): Promise<T> {
  const tracer = context.active().getValue(TRACER_KEY) as Tracer | undefined;
  if (tracer === undefined) return work();
  return tracer.startActiveSpan(name, { attributes, root: options.root ?? false }, async (span) => {
    try {
      return await work();
    } catch (error) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      throw error;
    } finally {
      span.end();
    }
  });
}
