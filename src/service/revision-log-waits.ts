/**
 * Waking log followers and sharing their reads (docs/logs.md, "Following"): the followers of one
 * revision are woken together, from one subscription to the change feed and one safety poll per
 * revision, and followers woken together share their reads. N followers of a revision then cost one
 * query per wake-up, not N (a popular revision's log followed by many dashboards, or one key opening
 * many streams, used to read the same new lines once per follower).
 *
 * A read is shared only with followers that want the very same thing (same type, cursor and page size)
 * and only while no wake-up came since it started: a follower woken by a line committed after a read
 * began must not be handed that read, or it would miss the line until the next safety poll.
 */
import type { Change, ChangeFeed } from '../db/change-feed.ts';
import type { RevisionLogRow, RevisionLogType } from '../store/schema.ts';
import type { LogSubject, RevisionLogService } from './revision-logs.ts';

/** Told `stale` when the revision's status may have changed (not only its lines). */
export type LogWake = (stale: boolean) => void;

interface SharedRead<T> {
  /** The revision's wake-up count when the read started. */
  wakes: number;
  result: Promise<T>;
}

interface WatchedRevision {
  revisionId: string;
  deploymentId: string;
  followers: Set<LogWake>;
  wakes: number;
  poll: NodeJS.Timeout;
  lineReads: Map<string, SharedRead<RevisionLogRow[]>>;
  subjectReads: Map<string, SharedRead<LogSubject | undefined>>;
}

export interface RevisionLogWaitsOptions {
  logs: RevisionLogService;
  /** Wakes followers when lines or statuses change; without it they are woken by the poll alone. */
  changes: ChangeFeed | undefined;
  /** How often the followers of a revision re-read everything without a wake-up (a lost notification). */
  pollMs: number;
}

export function createRevisionLogWaits({ logs, changes, pollMs }: RevisionLogWaitsOptions) {
  const revisions = new Map<string, WatchedRevision>();
  const byDeployment = new Map<string, Set<WatchedRevision>>();

  const wake = (watched: WatchedRevision, stale: boolean) => {
    watched.wakes += 1;
    for (const follower of watched.followers) follower(stale);
  };

  const onChange = (change: Change) => {
    if (change.kind === 'log') {
      const watched = revisions.get(change.revision_id);
      if (watched) wake(watched, false);
      return;
    }
    if (change.kind === 'reconnected') {
      for (const watched of revisions.values()) wake(watched, true);
      return;
    }
    const concerned = new Set(byDeployment.get(change.deployment_id));
    const own = change.revision_id === null ? undefined : revisions.get(change.revision_id);
    if (own) concerned.add(own);
    for (const watched of concerned) wake(watched, true);
  };
  const unsubscribe = changes?.subscribe(onChange);

  /** The read of `key`, shared with the followers asking for it since the last wake-up. */
  function shared<T>(
    reads: Map<string, SharedRead<T>>,
    wakes: number,
    key: string,
    read: () => Promise<T>,
  ): Promise<T> {
    const running = reads.get(key);
    if (running !== undefined && running.wakes === wakes) return running.result;
    const entry: SharedRead<T> = { wakes, result: read() };
    reads.set(key, entry);
    const forget = () => {
      if (reads.get(key) === entry) reads.delete(key);
    };
    // Only forgets; each follower awaiting `result` gets its failure itself.
    entry.result.then(forget, forget);
    return entry.result;
  }

  return {
    /** Wakes `follower` for the revision's changes until the returned function is called. */
    watch(revisionId: string, deploymentId: string, follower: LogWake): () => void {
      let watched = revisions.get(revisionId);
      if (watched === undefined) {
        const created: WatchedRevision = {
          revisionId,
          deploymentId,
          followers: new Set(),
          wakes: 0,
          poll: setInterval(() => wake(created, true), pollMs),
          lineReads: new Map(),
          subjectReads: new Map(),
        };
        revisions.set(revisionId, created);
        let siblings = byDeployment.get(deploymentId);
        if (siblings === undefined) byDeployment.set(deploymentId, (siblings = new Set()));
        siblings.add(created);
        watched = created;
      }
      const entry = watched;
      entry.followers.add(follower);
      return () => {
        entry.followers.delete(follower);
        if (entry.followers.size > 0 || revisions.get(revisionId) !== entry) return;
        clearInterval(entry.poll);
        revisions.delete(revisionId);
        const siblings = byDeployment.get(entry.deploymentId);
        siblings?.delete(entry);
        if (siblings?.size === 0) byDeployment.delete(entry.deploymentId);
      };
    },

    /** Up to `limit` lines after `afterId`, oldest first, read once for the followers woken together. */
    lines(revisionId: string, type: RevisionLogType, afterId: string, limit: number): Promise<RevisionLogRow[]> {
      const watched = revisions.get(revisionId);
      const read = () => logs.lines(revisionId, type, afterId, limit);
      if (watched === undefined) return read();
      return shared(watched.lineReads, watched.wakes, `${type}:${afterId}:${limit}`, read);
    },

    /** The revision as a log subject now (undefined when gone), read once for the followers woken together. */
    subject(workspaceId: string, deploymentId: string, revisionId: string): Promise<LogSubject | undefined> {
      const watched = revisions.get(revisionId);
      const read = () => logs.currentSubject(workspaceId, deploymentId, revisionId);
      if (watched === undefined) return read();
      return shared(watched.subjectReads, watched.wakes, `${workspaceId}:${deploymentId}`, read);
    },

    close(): void {
      unsubscribe?.();
      for (const watched of revisions.values()) clearInterval(watched.poll);
      revisions.clear();
      byDeployment.clear();
    },
  };
}

export type RevisionLogWaits = ReturnType<typeof createRevisionLogWaits>;
