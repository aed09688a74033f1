/**
 * Follows a revision's log (docs/logs.md, "Following"): every line so far, then new lines and status
 * changes as they happen, until the server sends `end`. A dropped connection is opened again after the
 * last line received (its event id is the cursor), so nothing is shown twice or missed.
 */
import type { Api } from './client.ts';
import { apiError } from './errors.ts';
import { readServerEvents } from './event-stream.ts';
import type { LogLine, LogType, Revision } from './types.ts';

export interface StatusEvent {
  status: Revision['status'];
  failure_reason: string | null;
  failure_message: string | null;
}

export interface LogFollowHandlers {
  onLines(lines: LogLine[]): void;
  onStatus(status: StatusEvent): void;
  /** The log is complete; `status` is the revision's final status (null: the revision is gone). */
  onEnd(status: string | null): void;
  /** The stream is open (true) or being opened again after a drop (false). */
  onConnection(connected: boolean): void;
  /** A refusal that retrying will not fix (404, 401...): following stops. */
  onError(error: Error): void;
}

/** Waits between reconnections grow to this, so a restarting service is not hammered. */
const MAX_RETRY_MS = 10_000;

export function followLog(
  api: Api,
  target: { deploymentId: string; revisionId: string; type: LogType },
  handlers: LogFollowHandlers,
): () => void {
  const abort = new AbortController();
  let cursor: string | undefined;
  let retryMs = 500;

  const once = async (): Promise<'ended' | 'dropped'> => {
    const {
      data: body,
      error,
      response,
    } = await api.GET('/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', {
      params: {
        path: { deployment_id: target.deploymentId, revision_id: target.revisionId },
        query: { type: target.type, follow: true, ...(cursor ? { cursor } : {}) },
      },
      headers: { accept: 'text/event-stream' },
      parseAs: 'stream',
      signal: abort.signal,
    });
    if (!response.ok || !body) {
      const parsed: unknown = error ?? (await response.json().catch(() => null));
      throw Object.assign(apiError(response, parsed), { permanent: response.status < 500 });
    }
    handlers.onConnection(true);
    retryMs = 500;
    for await (const events of readServerEvents(body)) {
      let lines: LogLine[] = [];
      const flush = () => {
        if (lines.length > 0) handlers.onLines(lines);
        lines = [];
      };
      for (const event of events) {
        if (event.event === 'log') {
          lines.push(JSON.parse(event.data) as LogLine);
          if (event.id) cursor = event.id;
          continue;
        }
        flush();
        if (event.event === 'status') handlers.onStatus(JSON.parse(event.data) as StatusEvent);
        if (event.event === 'end') {
          handlers.onEnd((JSON.parse(event.data) as { status: string | null }).status);
          return 'ended';
        }
      }
      flush();
    }
    return 'dropped';
  };

  const run = async () => {
    while (!abort.signal.aborted) {
      try {
        if ((await once()) === 'ended') return;
      } catch (error) {
        if (abort.signal.aborted) return;
        if ((error as { permanent?: boolean }).permanent) {
          handlers.onError(error as Error);
          return;
        }
        // A network error or a 5xx: the service may be restarting; try again below.
      }
      if (abort.signal.aborted) return;
      handlers.onConnection(false);
      await new Promise((resolve) => setTimeout(resolve, retryMs));
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    }
  };
  void run();
  return () => abort.abort();
}
