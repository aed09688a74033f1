/**
 * Following a revision: its log's lines and status changes from the service's event stream
 * (`GET .../logs?follow=true`, docs/logs.md), reconnecting after a dropped stream where it stopped
 * (Last-Event-ID), and waiting for a final state on top of it. The service pushes each change as it
 * happens, so nothing here polls.
 */
import type { LogLine, LogType, Revision, RevisionStatus } from './api-aliases.ts';
import { readEventStream } from './event-stream.ts';
import { sleep } from './sleep.ts';
import { SlipwayError } from './slipway-error.ts';

/**
 * The statuses a revision never leaves. The SDK does not import the service's state machine (it is its
 * own package); a Record over the generated RevisionStatus makes a status added to the API fail to
 * compile here until it is placed, and test/cli/sdk-final-status.test.ts holds it to the service's.
 */
const FINAL_REVISION_STATUS: Readonly<Record<RevisionStatus, boolean>> = {
  CREATING: false,
  QUEUED: false,
  AWAITING_BUILD: false,
  BUILDING: false,
  AWAITING_DEPLOY: false,
  DEPLOYING: false,
  CREATE_FAILED: true,
  BUILD_FAILED: true,
  DEPLOY_FAILED: true,
  DEPLOYED: true,
  SKIPPED: true,
  INTERRUPTED: true,
  UNKNOWN: true,
};

/** Whether a revision in `status` has reached its end (nothing will change it any more). */
export const isFinalRevisionStatus = (status: RevisionStatus): boolean => FINAL_REVISION_STATUS[status];

/**
 * What following needs of a client: SlipwayClient has it, and so does the dashboard's adapter over its
 * own fetch client. Narrow on purpose: this module is bundled into the dashboard, and naming
 * SlipwayClient would pull in its Node-only transport.
 */
export interface LogStreamSource {
  readonly baseUrl: string;
  readonly logs: {
    /** The answer's body of `GET .../logs?follow=true`; a refused request throws a SlipwayError. */
    openStream(
      deploymentId: string,
      revisionId: string,
      query: { type: LogType; cursor?: string },
      signal?: AbortSignal,
    ): Promise<ReadableStream<Uint8Array>>;
  };
}

/** What waiting needs besides the stream: reading the revision. */
export interface RevisionSource extends LogStreamSource {
  readonly revisions: { get(deploymentId: string, revisionId: string): Promise<Revision> };
}

export interface FollowLogOptions {
  /** `build` (default) or `deploy`. */
  type?: LogType;
  /** Start after this cursor (a page's next_cursor or a line's cursor); default the first line. */
  cursor?: string;
  signal?: AbortSignal;
  /** Reconnections in a row without an event before giving up (default 5; Infinity for a page left open). */
  maxReconnects?: number;
  /** Told true when the stream is open, false when it was lost and is being opened again. */
  onConnection?: (connected: boolean) => void;
}

export type LogEvent =
  | { kind: 'line'; line: LogLine; cursor: string | null }
  | { kind: 'status'; status: RevisionStatus; failure_reason: string | null; failure_message: string | null }
  /** The log is over: the revision's final status, or null when the revision is gone with its deployment. */
  | { kind: 'end'; status: RevisionStatus | null };

/** Lines and status changes of a revision's log until the service ends it. */
export async function* followLog(
  client: LogStreamSource,
  deploymentId: string,
  revisionId: string,
  options: FollowLogOptions = {},
): AsyncGenerator<LogEvent> {
  const type = options.type ?? 'build';
  const maxReconnects = options.maxReconnects ?? 5;
  let cursor = options.cursor;
  let failures = 0;
  for (;;) {
    let stream: ReadableStream<Uint8Array>;
    try {
      stream = await client.logs.openStream(
        deploymentId,
        revisionId,
        { type, ...(cursor ? { cursor } : {}) },
        options.signal,
      );
    } catch (error) {
      // A refusal (401, 404) is final; a lost connection or a failing (restarting) service is worth more tries.
      const retriable = error instanceof SlipwayError && (error.status === null || error.status >= 500);
      if (!retriable || options.signal?.aborted || ++failures > maxReconnects) throw error;
      options.onConnection?.(false);
      await pause(failures, options.signal);
      continue;
    }
    options.onConnection?.(true);
    try {
      for await (const message of readEventStream(stream)) {
        failures = 0;
        const data: unknown = JSON.parse(message.data);
        if (message.event === 'log') {
          if (message.id) cursor = message.id;
          yield { kind: 'line', line: data as LogLine, cursor: message.id };
        } else if (message.event === 'status') {
          yield {
            kind: 'status',
            ...(data as { status: RevisionStatus; failure_reason: string | null; failure_message: string | null }),
          };
        } else if (message.event === 'end') {
          yield { kind: 'end', status: (data as { status: RevisionStatus | null }).status };
          return;
        }
      }
    } catch (error) {
      if (options.signal?.aborted) throw error;
      // The connection broke mid-stream: resume after the last line seen, as EventSource would.
    }
    // Closed without `end`: the service restarted or a proxy cut the stream.
    if (options.signal?.aborted) return;
    options.onConnection?.(false);
    if (++failures > maxReconnects)
      throw new SlipwayError({
        status: null,
        code: 'connection_failed',
        detail: `the log stream of revision ${revisionId} kept closing before its end`,
        url: client.baseUrl,
      });
    await pause(failures, options.signal);
  }
}

export interface WaitOptions {
  /** Called with the status now, then at each change the stream reports (steps quicker than the service's read of them may be skipped; the final one never is). */
  onStatus?: (status: RevisionStatus, event: Extract<LogEvent, { kind: 'status' }>) => void;
  /** Called with each line of the build log as it is written. */
  onLine?: (line: LogLine) => void;
  signal?: AbortSignal;
}

/**
 * Resolves with the revision once it is in a final state (DEPLOYED, a failure, SKIPPED,
 * INTERRUPTED, UNKNOWN; docs/lifecycle.md), following its build log, which the service ends exactly
 * then. Throws a SlipwayError `not_found` when the revision disappears with its deployment.
 */
export async function waitForRevision(
  client: RevisionSource,
  deploymentId: string,
  revisionId: string,
  options: WaitOptions = {},
): Promise<Revision> {
  const current = await client.revisions.get(deploymentId, revisionId);
  if (isFinalRevisionStatus(current.status)) {
    options.onStatus?.(current.status, {
      kind: 'status',
      status: current.status,
      failure_reason: current.failure_reason,
      failure_message: current.failure_message,
    });
    return current;
  }
  for await (const event of followLog(client, deploymentId, revisionId, {
    type: 'build',
    ...(options.signal ? { signal: options.signal } : {}),
  })) {
    if (event.kind === 'line') options.onLine?.(event.line);
    else if (event.kind === 'status') options.onStatus?.(event.status, event);
    else if (event.status === null) {
      throw new SlipwayError({
        status: 404,
        code: 'not_found',
        detail: `Revision ID ${revisionId} is gone: its deployment was deleted.`,
        url: client.baseUrl,
      });
    } else {
      return client.revisions.get(deploymentId, revisionId);
    }
  }
  // followLog returns only after `end` (or an abort, which throws); reaching here means the caller aborted.
  throw options.signal?.reason ?? new Error('aborted');
}

/** Back-off between reconnections: 0.5 s, 1 s, 2 s ... up to 8 s. */
function pause(failures: number, signal: AbortSignal | undefined): Promise<void> {
  return sleep(Math.min(500 * 2 ** (failures - 1), 8_000), signal);
}
