/**
 * Revision logs: one row per line of a revision's build output (`build`) or of its app's output
 * (`deploy`), oldest first by id. Every append also notifies the change feed (`{"kind": "log"}`), so
 * that a follower on any replica wakes without polling (src/db/change-feed.ts).
 */
import { sql } from 'kysely';
import { CHANGES_CHANNEL, changePayload } from '../db/change-feed.ts';
import type { RevisionStatus } from '../domain/states.ts';
import type { Db, RevisionLogRow, RevisionLogStream, RevisionLogType } from './schema.ts';

export interface NewRevisionLogLine {
  stream: RevisionLogStream;
  line: string;
  at: Date;
}

/**
 * Appends `lines` in one statement: the multi-row insert and its notification together, so a follower
 * is never woken for lines that are not there, nor left asleep for lines that are (inside a transaction
 * the notification is delivered at commit, with the rows). Resolves to the last id written, or null.
 */
export async function appendRevisionLogs(
  db: Db,
  revisionId: string,
  type: RevisionLogType,
  lines: readonly NewRevisionLogLine[],
): Promise<string | null> {
  if (lines.length === 0) return null;
  const payload = changePayload({ kind: 'log', revision_id: revisionId });
  const result = await db
    .with('inserted', (q) =>
      q
        .insertInto('revision_logs')
        .values(lines.map((l) => ({ revision_id: revisionId, type, stream: l.stream, line: l.line, logged_at: l.at })))
        .returning('id'),
    )
    .selectNoFrom([
      sql<string | null>`(select max(id)::text from inserted)`.as('last_id'),
      sql<unknown>`pg_notify(${CHANGES_CHANNEL}, ${payload})`.as('notified'),
    ])
    .executeTakeFirstOrThrow();
  return result.last_id;
}

/** Lines after `afterId` (all when null), oldest first. */
export async function listRevisionLogs(
  db: Db,
  revisionId: string,
  type: RevisionLogType,
  afterId: string | null,
  limit: number,
): Promise<RevisionLogRow[]> {
  let query = db.selectFrom('revision_logs').selectAll().where('revision_id', '=', revisionId).where('type', '=', type);
  if (afterId !== null) query = query.where('id', '>', afterId);
  return query.orderBy('id').limit(limit).execute();
}

/** How many lines a revision's log of `type` holds now. */
export async function countRevisionLogs(db: Db, revisionId: string, type: RevisionLogType): Promise<number> {
  const row = await db
    .selectFrom('revision_logs')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('revision_id', '=', revisionId)
    .where('type', '=', type)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/**
 * Deletes all but the newest `keep` lines of a revision's log of `type` (app output runs forever; the
 * log keeps its end). Resolves to the number of lines deleted.
 */
export async function trimRevisionLogs(
  db: Db,
  revisionId: string,
  type: RevisionLogType,
  keep: number,
): Promise<number> {
  if (!Number.isInteger(keep) || keep < 1) throw new RangeError(`keep must be a positive integer, not ${keep}`);
  // The keep-th newest id, read backwards on revision_logs_page; with fewer lines it is null and
  // `id < null` deletes nothing.
  const oldestKept = db
    .selectFrom('revision_logs')
    .select('id')
    .where('revision_id', '=', revisionId)
    .where('type', '=', type)
    .orderBy('id', 'desc')
    .offset(keep - 1)
    .limit(1);
  const result = await db
    .deleteFrom('revision_logs')
    .where('revision_id', '=', revisionId)
    .where('type', '=', type)
    .where('id', '<', oldestKept)
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}

/** What a log follower needs to know about a revision: its status and whether it still serves. */
export interface LogSubject {
  status: RevisionStatus;
  failure_reason: string | null;
  failure_message: string | null;
  /** The deployment's active revision (the one whose app output is live). */
  active_revision_id: string | null;
}

/** The revision in the caller's workspace and deployment, or undefined (unknown, another's, or gone). */
export async function getLogSubject(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  revisionId: string,
): Promise<LogSubject | undefined> {
  const row = await db
    .selectFrom('revisions as r')
    .innerJoin('deployments as d', 'd.id', 'r.deployment_id')
    .select(['r.status', 'r.failure_reason', 'r.failure_message', 'd.active_revision_id'])
    .where('r.workspace_id', '=', workspaceId)
    .where('r.deployment_id', '=', deploymentId)
    .where('r.id', '=', revisionId)
    .executeTakeFirst();
  return row;
}

/** Levels LangChain's `langgraph deploy logs` shows and filters by. */
export const LOG_LEVELS = ['DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * A line's level, in SQL so a filter by level stays in the query: the level word a line starts with
 * (`INFO:`, `error:`, `[WARN]`, as uvicorn, winston and most loggers print it), else ERROR for stderr
 * and INFO for stdout and the platform's own lines.
 */
const levelOf = sql<LogLevel>`case
  when line ~* '^[^a-z0-9]{0,3}(critical|fatal)\\M' then 'CRITICAL'
  when line ~* '^[^a-z0-9]{0,3}err(or)?\\M' then 'ERROR'
  when line ~* '^[^a-z0-9]{0,3}warn(ing)?\\M' then 'WARNING'
  when line ~* '^[^a-z0-9]{0,3}info\\M' then 'INFO'
  when line ~* '^[^a-z0-9]{0,3}(debug|trace)\\M' then 'DEBUG'
  when stream = 'stderr' then 'ERROR'
  else 'INFO'
end`;

export interface LogSearch {
  order: 'asc' | 'desc';
  /** The id of the last line of the previous page: the page goes on after it (asc) or before it (desc). */
  fromId: string | null;
  limit: number;
  level?: LogLevel;
  /** Lines containing this text, ignoring case. */
  contains?: string;
  /** Lines written at or after, and at or before, these times. */
  since?: Date;
  until?: Date;
}

/** A page of a revision's log of `type` with each line's level, oldest or newest first, filtered. */
export async function searchRevisionLogs(
  db: Db,
  revisionId: string,
  type: RevisionLogType,
  search: LogSearch,
): Promise<(RevisionLogRow & { level: LogLevel })[]> {
  let query = db
    .selectFrom('revision_logs')
    .selectAll()
    .select(levelOf.as('level'))
    .where('revision_id', '=', revisionId)
    .where('type', '=', type);
  if (search.fromId !== null) query = query.where('id', search.order === 'asc' ? '>' : '<', search.fromId);
  if (search.level) query = query.where(levelOf, '=', search.level);
  // strpos rather than LIKE: the text is the user's, and % or _ in it mean themselves.
  if (search.contains) query = query.where(sql<number>`strpos(lower(line), lower(${search.contains}))`, '>', 0);
  if (search.since) query = query.where('logged_at', '>=', search.since);
  if (search.until) query = query.where('logged_at', '<=', search.until);
  return query.orderBy('id', search.order).limit(search.limit).execute();
}

/** The revision a deployment's logs are read from without a revision: its active one, else its latest. */
export async function currentLogRevision(
  db: Db,
  workspaceId: string,
  deploymentId: string,
): Promise<{ revisionId: string | null } | undefined> {
  const row = await db
    .selectFrom('deployments')
    .select(['active_revision_id', 'latest_revision_id'])
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', deploymentId)
    .executeTakeFirst();
  return row === undefined ? undefined : { revisionId: row.active_revision_id ?? row.latest_revision_id };
}
