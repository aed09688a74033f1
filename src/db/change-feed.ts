/**
 * The change feed: one dedicated PostgreSQL connection per process that LISTENs on `slipway_changes`
 * and hands each notification to in-process subscribers. Triggers (migrations/005_data_plane.sql) send
 * a notification for every revision status change and every deployment status or active-revision
 * change, so the worker and the log streams of every replica wake on a change made by any replica.
 *
 * Notifications are a wake-up signal, never the source of truth: a subscriber re-reads the database.
 * A lost connection is re-opened with back-off; subscribers get a `{ kind: 'reconnected' }` change so
 * they can re-read what they might have missed.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import type { DeploymentStatus, RevisionStatus } from '../domain/states.ts';

export const CHANGES_CHANNEL = 'slipway_changes';

/** The statuses are the columns' own, which their CHECK constraints hold to the domain's unions. */
export type Change =
  | { kind: 'revision'; deployment_id: string; revision_id: string; status: RevisionStatus }
  | { kind: 'deployment'; deployment_id: string; revision_id: string | null; status: DeploymentStatus }
  | { kind: 'log'; revision_id: string }
  | { kind: 'reconnected' };

export type ChangeListener = (change: Change) => void;

export interface ChangeFeed {
  /** Calls `listener` for every change until the returned function is called. */
  subscribe(listener: ChangeListener): () => void;
  close(): Promise<void>;
}

function parse(payload: string | undefined): Change | null {
  if (!payload) return null;
  try {
    const value = JSON.parse(payload) as Change;
    return typeof value === 'object' && value !== null && typeof value.kind === 'string' ? value : null;
  } catch {
    return null;
  }
}

/** Opens the feed on `connectionString`; resolves once the first LISTEN is in place. */
export async function openChangeFeed(
  connectionString: string,
  logger: Pick<Logger, 'warn' | 'error'>,
): Promise<ChangeFeed> {
  const listeners = new Set<ChangeListener>();
  let client: pg.Client | null = null;
  let closed = false;
  let retryTimer: NodeJS.Timeout | null = null;

  const emit = (change: Change) => {
    for (const listener of listeners) {
      try {
        listener(change);
      } catch (error) {
        // A subscriber's bug must not stop the others from hearing about the change.
        logger.error({ err: error }, 'change feed subscriber failed');
      }
    }
  };

  const connect = async (): Promise<void> => {
    const next = new pg.Client({ connectionString });
    next.on('notification', (message) => {
      const change = parse(message.payload);
      if (change) emit(change);
    });
    next.on('error', () => undefined);
    next.on('end', () => {
      if (closed || client !== next) return;
      client = null;
      logger.warn('change feed connection lost; reconnecting');
      schedule(500);
    });
    await next.connect();
    await next.query(`listen ${CHANGES_CHANNEL}`);
    client = next;
  };

  const schedule = (delayMs: number) => {
    retryTimer = setTimeout(() => {
      retryTimer = null;
      connect().then(
        () => emit({ kind: 'reconnected' }),
        (error: unknown) => {
          logger.warn({ err: error }, 'change feed could not reconnect; retrying');
          if (!closed) schedule(Math.min(delayMs * 2, 10_000));
        },
      );
    }, delayMs);
    retryTimer.unref();
  };

  await connect();
  return {
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async close() {
      closed = true;
      if (retryTimer) clearTimeout(retryTimer);
      listeners.clear();
      const current = client;
      client = null;
      await current?.end().catch(() => undefined);
    },
  };
}

/** Sends a change on `db`'s connection (inside its transaction it is delivered at commit). */
export function changePayload(change: Change): string {
  return JSON.stringify(change);
}
