/**
 * Follows a revision's log (docs/logs.md, "Following") with the client's own follower
 * (packages/sdk/src/revision-follow.ts): every line so far, then new lines and status changes as they
 * happen, until the server sends `end`; a dropped connection is opened again after the last line
 * received. Here it reads through the dashboard's fetch client (the signed-in key, sign-out on 401).
 */
import type { LogEvent, LogStreamSource } from '@slipway/sdk/revision-follow';
import { followLog as followRevisionLog } from '@slipway/sdk/revision-follow';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import type { Api } from './client.ts';
import type { LogLine, LogType } from './types.ts';

export type StatusEvent = Extract<LogEvent, { kind: 'status' }>;

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

/** The follower's view of the dashboard's API client. */
export function logStreamSource(api: Api): LogStreamSource {
  const baseUrl = window.location.origin;
  return {
    baseUrl,
    logs: {
      async openStream(deploymentId, revisionId, query, signal) {
        let answer;
        try {
          answer = await api.GET('/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', {
            params: {
              path: { deployment_id: deploymentId, revision_id: revisionId },
              query: { ...query, follow: true },
            },
            headers: { accept: 'text/event-stream' },
            parseAs: 'stream',
            ...(signal ? { signal } : {}),
          });
        } catch (cause) {
          if (signal?.aborted) throw cause;
          // fetch rejects only when no answer came: the follower tries again.
          throw new SlipwayError({
            status: null,
            code: 'connection_failed',
            detail: 'The service could not be reached.',
            url: baseUrl,
            cause,
          });
        }
        const { data: body, error, response } = answer;
        if (!response.ok || !body) {
          const parsed: unknown = error ?? (await response.json().catch(() => null));
          throw SlipwayError.fromAnswer(response, parsed);
        }
        return body;
      },
    },
  };
}

/** Follows until the log ends, a refusal, or the returned function is called (the page is left). */
export function followLog(
  api: Api,
  target: { deploymentId: string; revisionId: string; type: LogType },
  handlers: LogFollowHandlers,
): () => void {
  const abort = new AbortController();
  const run = async () => {
    try {
      for await (const event of followRevisionLog(logStreamSource(api), target.deploymentId, target.revisionId, {
        type: target.type,
        signal: abort.signal,
        // A page left open waits out a restart of the service, however long.
        maxReconnects: Infinity,
        onConnection: (connected) => handlers.onConnection(connected),
      })) {
        if (event.kind === 'line') handlers.onLines([event.line]);
        else if (event.kind === 'status') handlers.onStatus(event);
        else handlers.onEnd(event.status);
      }
    } catch (error) {
      if (!abort.signal.aborted) handlers.onError(error instanceof Error ? error : new Error(String(error)));
    }
  };
  void run();
  return () => abort.abort();
}
