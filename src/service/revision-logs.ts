/**
 * A revision's logs, as its readers see them (docs/logs.md): pages of its build or app output, what a
 * follower needs to know about the revision, and the search of LangChain's CLI (src/service/log-search.ts).
 * Every read starts from the caller's workspace and deployment; a revision elsewhere is a 404. Following
 * a log (waiting on the change feed, writing events) is the route's (src/routes/revision-logs.ts).
 */
import type { Kysely } from 'kysely';
import { notFound } from '../errors.ts';
import { getDeployment } from '../store/deployments.ts';
import {
  currentLogRevision,
  getLogSubject,
  listRevisionLogs,
  searchRevisionLogs,
  type LogLevel,
  type LogSubject,
} from '../store/revision-logs.ts';
import type { Database, RevisionLogRow, RevisionLogType } from '../store/schema.ts';
import { encodeLogOffset, readLogSearch, type LogSearchAsked } from './log-search.ts';

export type { LogSubject };

export interface RevisionLogServiceDeps {
  db: Kysely<Database>;
}

/** A page of a log search: lines with their level, and the offset of the next page. */
export interface LogSearchPage {
  lines: (RevisionLogRow & { level: LogLevel })[];
  /** The given offset (or null) when the page is empty. */
  next_offset: string | null;
}

export function createRevisionLogService({ db }: RevisionLogServiceDeps) {
  /** The revision as a log subject; else the 404 a user can act on (its deployment, or it). */
  async function subject(workspaceId: string, deploymentId: string, revisionId: string): Promise<LogSubject> {
    const found = await getLogSubject(db, workspaceId, deploymentId, revisionId);
    if (found) return found;
    if (!(await getDeployment(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
    throw notFound('Revision', revisionId);
  }

  /** Searches the log of `revisionId` (none yet: an empty page), once the search itself is read. */
  async function search(
    revisionId: string | null,
    type: RevisionLogType,
    asked: LogSearchAsked,
  ): Promise<LogSearchPage> {
    const wanted = readLogSearch(asked);
    if (revisionId === null) return { lines: [], next_offset: asked.offset ?? null };
    const lines = await searchRevisionLogs(db, revisionId, type, wanted);
    const last = lines.at(-1);
    return { lines, next_offset: last ? encodeLogOffset(last.id) : (asked.offset ?? null) };
  }

  return {
    subject,

    /** The revision as a log subject now, or undefined when it is gone (with its deployment). */
    currentSubject: (workspaceId: string, deploymentId: string, revisionId: string) =>
      getLogSubject(db, workspaceId, deploymentId, revisionId),

    /** Up to `limit` lines after `afterId` ('0': from the first), oldest first; 404 as `subject`. */
    async page(
      workspaceId: string,
      deploymentId: string,
      revisionId: string,
      type: RevisionLogType,
      afterId: string,
      limit: number,
    ): Promise<RevisionLogRow[]> {
      await subject(workspaceId, deploymentId, revisionId);
      return listRevisionLogs(db, revisionId, type, afterId, limit);
    },

    /** Lines after `afterId`, oldest first, of a revision whose subject was read already. */
    lines: (revisionId: string, type: RevisionLogType, afterId: string, limit: number): Promise<RevisionLogRow[]> =>
      listRevisionLogs(db, revisionId, type, afterId, limit),

    /** The CLI's search of a revision's log: 404 as `subject`, before the search is read. */
    async searchRevision(
      workspaceId: string,
      deploymentId: string,
      revisionId: string,
      type: RevisionLogType,
      asked: LogSearchAsked,
    ): Promise<LogSearchPage> {
      await subject(workspaceId, deploymentId, revisionId);
      return search(revisionId, type, asked);
    },

    /** The CLI's search of a deployment's app output: its active revision's, else its latest one's. */
    async searchDeployment(workspaceId: string, deploymentId: string, asked: LogSearchAsked): Promise<LogSearchPage> {
      const current = await currentLogRevision(db, workspaceId, deploymentId);
      if (!current) throw notFound('Deployment', deploymentId);
      return search(current.revisionId, 'deploy', asked);
    },
  };
}

export type RevisionLogService = ReturnType<typeof createRevisionLogService>;
