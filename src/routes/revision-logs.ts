/**
 * A revision's logs (docs/logs.md): its build output (`type=build`) or its app's output
 * (`type=deploy`), paged oldest first with an opaque cursor, or with `follow=true` streamed as
 * server-sent events until there can be no more lines.
 *
 * A follower sleeps until the change feed says its revision has new lines or changed status (any
 * replica's writes wake it); a slow safety poll covers a notification lost with the feed's connection.
 * Without a change feed (an app built without one) followers poll every POLL_WITHOUT_FEED_MS instead.
 * The followers of one revision are woken together and share their reads
 * (src/service/revision-log-waits.ts): new lines cost one query per wake-up, however many follow.
 * Each followed stream holds a slot of its key and address while open (src/http/stream-limits.ts).
 */
import type { ServerResponse } from 'node:http';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyBaseLogger } from 'fastify';
import { Type } from 'typebox';
import type { ChangeFeed } from '../db/change-feed.ts';
import { isFinalRevisionStatus } from '../domain/states.ts';
import { ValidationError, type ValidationIssue } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { DateTime, StringEnum, Uuid, errorResponses } from '../http/schema-helpers.ts';
import { createRevisionLogWaits, type RevisionLogWaits } from '../service/revision-log-waits.ts';
import type { LogSubject, RevisionLogService } from '../service/revision-logs.ts';
import type { RevisionLogRow, RevisionLogType } from '../store/schema.ts';
import { needs } from '../http/route-needs.ts';

const LOG_TYPES = ['build', 'deploy'] as const;
const LOG_STREAMS = ['stdout', 'stderr', 'system'] as const;

/** Lines read per query while a follower catches up. */
const FOLLOW_PAGE = 500;
const POLL_WITHOUT_FEED_MS = 1_000;
/** How often the followers of a revision re-read everything, in case a notification was lost. */
const SAFETY_POLL_MS = 5_000;
/** Comment lines that keep proxies from closing a quiet stream. */
const HEARTBEAT_MS = 15_000;

export interface RevisionLogRouteDeps {
  logs: RevisionLogService;
  /** Wakes followers when lines or statuses change; without it followers poll every second. */
  changes?: ChangeFeed;
}

// ----- cursors -----------------------------------------------------------------------------------

// A cursor is the id of the last line seen, wrapped so that clients treat it as opaque (the encoding
// may change; only a cursor this endpoint returned is accepted).
const CURSOR_PREFIX = 'log:';
const CURSOR_ID = /^(0|[1-9][0-9]{0,18})$/;
const BASE64URL = /^[A-Za-z0-9_-]{1,200}$/;
const MAX_ID = 9223372036854775807n;

export function encodeLogCursor(afterId: string): string {
  return Buffer.from(`${CURSOR_PREFIX}${afterId}`).toString('base64url');
}

/** The id a cursor points after, or a 422 at `loc`. */
function decodeLogCursor(cursor: string, loc: ValidationIssue['loc']): string {
  if (BASE64URL.test(cursor)) {
    const text = Buffer.from(cursor, 'base64url').toString('utf8');
    const id = text.startsWith(CURSOR_PREFIX) ? text.slice(CURSOR_PREFIX.length) : '';
    // The round trip refuses non-canonical spellings, so an unchanged cursor is the very same string.
    if (CURSOR_ID.test(id) && BigInt(id) <= MAX_ID && encodeLogCursor(id) === cursor) return id;
  }
  throw new ValidationError([
    {
      type: 'value_error',
      loc,
      msg: 'Value error, not a cursor returned by this endpoint: pass next_cursor (or an event id) unchanged',
      input: cursor,
    },
  ]);
}

// ----- schemas -----------------------------------------------------------------------------------

const LogLine = Type.Object(
  {
    time: DateTime({ description: 'When the line was written, ISO 8601 with milliseconds.' }),
    stream: StringEnum(LOG_STREAMS, {
      description: 'stdout or stderr of the process, or system for lines the platform writes.',
    }),
    message: Type.String({
      description: 'The line without its newline, colours and control characters; secret values are ********.',
    }),
  },
  { title: 'LogLine' },
);

const LogPage = Type.Object(
  {
    lines: Type.Array(LogLine),
    next_cursor: Type.String({
      description: 'Pass as cursor to get the lines after this page; unchanged when the page is empty.',
    }),
  },
  { title: 'LogPage', description: 'A page of log lines, oldest first.' },
);

const EVENT_STREAM_DESCRIPTION = [
  'With follow=true: server-sent events. First every line after the cursor, then new lines as they are written,',
  'each as `event: log` with `id: <cursor>` and data `{"time", "stream", "message"}`; the revision status now and',
  'at every change as `event: status` with data `{"status", "failure_reason", "failure_message"}`; a `: heartbeat`',
  'comment every 15 s; and `event: end` (data `{"status"}`) before the stream closes: for a build log when the',
  'revision reaches a final status, for a deploy log when it is final and no longer the active revision.',
  'Reconnect with Last-Event-ID to resume.',
].join(' ');

const LogParams = Type.Object({ deployment_id: Uuid(), revision_id: Uuid() });

const LogQuery = Type.Object({
  type: Type.Optional(
    StringEnum(LOG_TYPES, {
      default: 'build',
      description: "build: the build output; deploy: the running app's stdout and stderr.",
    }),
  ),
  limit: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 1000,
      default: 100,
      description: 'Lines per page, 1 to 1000 (ignored with follow).',
    }),
  ),
  cursor: Type.Optional(
    Type.String({
      maxLength: 200,
      description: 'next_cursor of a previous page (or an event id); absent: from the first line.',
    }),
  ),
  follow: Type.Optional(
    Type.Boolean({
      default: false,
      description: 'Stream the lines as server-sent events (text/event-stream) until the log ends.',
    }),
  ),
});

const LogHeaders = Type.Object({
  'last-event-id': Type.Optional(
    Type.String({ maxLength: 200, description: 'With follow=true, resume after this event id (it wins over cursor).' }),
  ),
});

const lineView = (row: RevisionLogRow) => ({
  time: row.logged_at.toISOString(),
  stream: row.stream,
  message: row.line,
});

// ----- routes ------------------------------------------------------------------------------------

export const revisionLogRoutes: FastifyPluginAsyncTypebox<RevisionLogRouteDeps> = async (app, deps) => {
  const { logs } = deps;
  const open = new Set<Follower>();
  const waits = createRevisionLogWaits({
    logs,
    changes: deps.changes,
    pollMs: deps.changes ? SAFETY_POLL_MS : POLL_WITHOUT_FEED_MS,
  });
  app.addHook('onClose', async () => waits.close());

  // app.close() waits for every connection; an open stream would hold it forever, so end them first.
  app.addHook('preClose', async () => {
    const done = [...open].map((f) => f.done);
    for (const follower of open) follower.stop();
    await Promise.all(done);
  });

  app.get(
    '/v2/deployments/:deployment_id/revisions/:revision_id/logs',
    {
      // A followed log is held open: it takes a stream slot of its key and address (src/http/stream-limits.ts).
      config: needs({
        auth: 'workspace',
        longLived: (request) => request.method === 'GET' && (request.query as { follow?: boolean }).follow === true,
      }),
      schema: {
        operationId: 'getRevisionLogs',
        tags: ['revisions'],
        summary: 'Get or follow the logs of a revision',
        description:
          'Build output or app output, oldest first. follow=true streams it as server-sent events (see the text/event-stream response).',
        params: LogParams,
        querystring: LogQuery,
        headers: LogHeaders,
        response: {
          200: {
            description: 'A page of lines (JSON), or with follow=true an event stream.',
            content: {
              'application/json': { schema: LogPage },
              'text/event-stream': { schema: Type.String({ description: EVENT_STREAM_DESCRIPTION }) },
            },
          },
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request, reply) => {
      const workspaceId = workspaceOf(request);
      const { deployment_id: deploymentId, revision_id: revisionId } = request.params;
      const { query } = request;
      const type: RevisionLogType = query.type ?? 'build';
      const follow = (query.follow ?? false) && request.method === 'GET';
      const lastEventId = request.headers['last-event-id'];
      const afterId =
        follow && typeof lastEventId === 'string' && lastEventId !== ''
          ? decodeLogCursor(lastEventId, ['header', 'last-event-id'])
          : query.cursor !== undefined
            ? decodeLogCursor(query.cursor, ['query', 'cursor'])
            : '0';

      if (!follow) {
        const rows = await logs.page(workspaceId, deploymentId, revisionId, type, afterId, query.limit ?? 100);
        return reply
          .type('application/json; charset=utf-8')
          .send({ lines: rows.map(lineView), next_cursor: encodeLogCursor(rows.at(-1)?.id ?? afterId) });
      }

      await logs.subject(workspaceId, deploymentId, revisionId);
      // From here on the response is ours to write: headers set by hooks (x-request-id) go along.
      reply.hijack();
      const headers: Record<string, string | number | string[]> = {};
      for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) headers[name] = value;
      reply.raw.writeHead(200, {
        ...headers,
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        // Proxies (nginx) must pass events on as they come rather than buffer them.
        'x-accel-buffering': 'no',
        // A stream is never reused: closing the connection with it lets app.close() finish at once.
        connection: 'close',
      });
      reply.raw.flushHeaders();
      const follower = startFollower({
        waits,
        heartbeatMs: HEARTBEAT_MS,
        workspaceId,
        deploymentId,
        revisionId,
        type,
        afterId,
        raw: reply.raw,
        log: request.log,
      });
      open.add(follower);
      await follower.done;
      open.delete(follower);
      return reply;
    },
  );
};

// ----- following ---------------------------------------------------------------------------------

interface FollowOptions {
  waits: RevisionLogWaits;
  heartbeatMs: number;
  workspaceId: string;
  deploymentId: string;
  revisionId: string;
  type: RevisionLogType;
  afterId: string;
  raw: ServerResponse;
  log: FastifyBaseLogger;
}

interface Follower {
  /** Ends the stream without `event: end` (the client disconnected, or the server is closing). */
  stop(): void;
  /** Settles once the stream has ended and everything it held is released. */
  done: Promise<void>;
}

/** A build log ends with its revision; a deploy log when its revision is final and no longer serves. */
function logEnded(type: RevisionLogType, revisionId: string, subject: LogSubject): boolean {
  if (!isFinalRevisionStatus(subject.status)) return false;
  return type === 'build' || subject.active_revision_id !== revisionId;
}

const event = (name: string, data: unknown, id?: string): string =>
  `event: ${name}\n${id === undefined ? '' : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`;

const statusData = (s: LogSubject) => ({
  status: s.status,
  failure_reason: s.failure_reason,
  failure_message: s.failure_message,
});

function startFollower(o: FollowOptions): Follower {
  const { raw } = o;
  let open = true;
  let signalled = false;
  let stale = true;
  let resolveWait: (() => void) | null = null;
  let stopped!: () => void;
  const stopSignal = new Promise<void>((resolve) => (stopped = resolve));

  const wake = () => {
    signalled = true;
    resolveWait?.();
  };
  const stop = () => {
    open = false;
    stopped();
    wake();
  };

  /** Resolves when woken (now, or earlier and unheard); the revision's safety poll wakes it too. */
  const waitForWake = () =>
    new Promise<void>((resolve) => {
      const finish = () => {
        resolveWait = null;
        signalled = false;
        resolve();
      };
      resolveWait = finish;
      if (signalled || !open) finish();
    });

  /** Writes, and waits while a slow client's buffer is full (a fast log must not pile up in memory). */
  const send = async (text: string) => {
    if (!open || raw.writableEnded) return;
    if (raw.write(text)) return;
    await Promise.race([new Promise<void>((resolve) => raw.once('drain', resolve)), stopSignal]);
  };

  // A wake-up for lines needs no status read; a status change, a reconnected feed or the poll do.
  const unwatch = o.waits.watch(o.revisionId, o.deploymentId, (statusMayHaveChanged) => {
    if (statusMayHaveChanged) stale = true;
    wake();
  });
  raw.on('close', stop);
  const heartbeat = setInterval(() => void send(': heartbeat\n\n'), o.heartbeatMs);

  /** Sends every line after `cursor`; resolves to the new cursor. */
  const sendLines = async (cursor: string): Promise<string> => {
    let after = cursor;
    while (open) {
      const rows = await o.waits.lines(o.revisionId, o.type, after, FOLLOW_PAGE);
      if (rows.length === 0) break;
      let text = '';
      for (const row of rows) text += event('log', lineView(row), encodeLogCursor(row.id));
      await send(text);
      after = rows.at(-1)!.id;
      if (rows.length < FOLLOW_PAGE) break;
    }
    return after;
  };

  const run = async () => {
    let cursor = o.afterId;
    let subject: LogSubject | undefined;
    let sent: string | null = null;
    while (open) {
      // The status is read before the lines: a writer closes before the revision moves on, so every
      // line of a revision read as final is already there for the read that follows.
      if (stale) {
        stale = false;
        subject = await o.waits.subject(o.workspaceId, o.deploymentId, o.revisionId);
      }
      cursor = await sendLines(cursor);
      if (!open) return;
      if (subject === undefined) {
        // The revision is gone with its deployment.
        await send(event('end', { status: null }));
        return;
      }
      const status = JSON.stringify(statusData(subject));
      if (status !== sent) {
        await send(event('status', statusData(subject)));
        sent = status;
      }
      if (logEnded(o.type, o.revisionId, subject)) {
        await send(event('end', { status: subject.status }));
        return;
      }
      await waitForWake();
    }
  };

  const done = run()
    .catch((error: unknown) => o.log.error({ err: error, revisionId: o.revisionId }, 'revision log stream failed'))
    .finally(() => {
      open = false;
      clearInterval(heartbeat);
      unwatch();
      raw.off('close', stop);
      if (!raw.writableEnded) raw.end();
    });
  return { stop, done };
}
