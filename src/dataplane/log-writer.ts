/**
 * The log writer: what the data plane writes a build's or an app's output through, and the platform's
 * own lines ("Running: npm ci"). It turns raw chunks into stored revision log lines (docs/logs.md):
 *
 * - lines: chunks are split on newlines; a partial line waits for its newline or for `flush()`. After a
 *   carriage return only the text that follows is kept (a progress bar keeps its last state).
 * - clean: ANSI escape sequences (colours, cursor moves) and other control characters are removed; the
 *   text stays.
 * - redact: every occurrence of each secret value, and of its base64 and URL encodings, becomes
 *   `********`, so a secret the app prints never reaches the log (nor `tail()`, which failure messages
 *   are made of); src/dataplane/secret-masks.ts says what is looked for.
 *   (Lines, cleaning, redacting and cutting a long line: src/dataplane/log-line-splitter.ts.)
 * - cap: a line longer than MAX_LINE_CHARS is cut and marked; a `build` log stores its first `maxLines`
 *   lines and then one system line saying it was cut; a `deploy` log keeps its newest `maxLines`,
 *   trimmed now and then rather than on every batch.
 * - batch: lines are inserted every `flushIntervalMs` or every BATCH_LINES lines, one insert at a time,
 *   so `write()` never waits on the database and the process producing output is never slowed down.
 *   Each batch goes, as it is, through the data plane's reports (`appendLogLines`, and `trimLog` for a
 *   deploy log: src/domain/data-plane.ts), one statement each: this module writes no row itself.
 *
 * A failed insert is logged and its lines are lost: a log must never stop a build or an app.
 *
 * Callers should `close()` (or `flush()`) before moving the revision to its next status, so a follower
 * that ends its stream at a final status has seen every line (src/routes/revision-logs.ts).
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { OwnPlaneReports, RevisionLogKind, RevisionLogLine } from '../domain/data-plane.ts';
import { countRevisionLogs } from '../store/revision-logs.ts';
import type { Database } from '../store/schema.ts';
import { createLogLineSplitter } from './log-line-splitter.ts';

export { REDACTED } from './secret-masks.ts';
export { MAX_LINE_CHARS } from './log-line-splitter.ts';

export interface LogWriter {
  /** Raw output of a process (chunks may split lines; keep a partial line until its newline or flush). */
  write(stream: 'stdout' | 'stderr', chunk: Buffer | string): void;
  /** A line written by the platform itself (e.g. "Running: npm ci", "Health check passed"). */
  system(line: string): void;
  /** The last n lines (in memory), for failure messages. */
  tail(n: number): string[];
  flush(): Promise<void>;
  close(): Promise<void>;
}

export interface LogWriterOptions {
  /** Read only: how many lines the log holds already. */
  db: Kysely<Database>;
  /** Batches are stored, and a deploy log trimmed, through the data plane's reports (the lifecycle writes them). */
  reports: OwnPlaneReports;
  revisionId: string;
  type: RevisionLogKind;
  /** Lines kept per revision and type (config `logMaxLines`). */
  maxLines: number;
  /** The revision's secret values; each non-empty one (and its encodings) is masked wherever it appears. */
  redact: string[];
  logger: Logger;
  flushIntervalMs?: number;
}

/** A batch is written at once when this many lines wait, without waiting for the timer. */
const BATCH_LINES = 500;
/** Rows per insert statement (5 parameters a row stays far below PostgreSQL's 65535). */
const INSERT_ROWS = 1000;
/** Lines waiting while the database is slow; more are dropped (and counted) rather than filling memory. */
const MAX_PENDING_LINES = 20_000;
/** Lines remembered for `tail()`. */
const TAIL_LINES = 200;
/** Platform lines still stored after a build log was cut (e.g. "Build failed: exit code 1"). */
const SYSTEM_LINES_PAST_CAP = 50;

export function createLogWriter(options: LogWriterOptions): LogWriter {
  const { db, reports, revisionId, type, maxLines, logger } = options;
  const flushIntervalMs = options.flushIntervalMs ?? 200;
  // A deploy log may grow this far past maxLines before it is trimmed back (one delete per slack lines).
  const trimSlack = Math.max(100, Math.ceil(maxLines / 10));

  const recent: string[] = [];
  let pending: RevisionLogLine[] = [];
  let dropped = 0;
  /** Lines the log holds: read once before the first insert (an earlier attempt may have written some). */
  let stored: number | null = null;
  let capped = false;
  let systemPastCap = 0;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let closed = false;
  let closing: Promise<void> | null = null;

  const accept = (stream: RevisionLogLine['stream'], line: string) => {
    recent.push(line);
    if (recent.length > TAIL_LINES) recent.shift();
    // Past a build log's cap only platform lines are still stored; skip the rest before they queue.
    if (capped && stream !== 'system') return;
    if (pending.length >= MAX_PENDING_LINES) {
      dropped += 1;
      return;
    }
    pending.push({ stream, line, at: new Date() });
    if (pending.length >= BATCH_LINES) void kick();
    else if (timer === null) {
      timer = setTimeout(() => {
        timer = null;
        void kick();
      }, flushIntervalMs);
      timer.unref();
    }
  };

  const lines = createLogLineSplitter(options.redact, accept);

  /** Applies the build log's cap to a batch about to be inserted. */
  const applyBuildCap = (batch: RevisionLogLine[], already: number): RevisionLogLine[] => {
    if (type !== 'build') return batch;
    const out: RevisionLogLine[] = [];
    for (const line of batch) {
      if (!capped) {
        if (already + out.length < maxLines) {
          out.push(line);
          continue;
        }
        capped = true;
        out.push({
          stream: 'system',
          line: `Log cut: only the first ${maxLines} lines of build output are kept.`,
          at: line.at,
        });
      }
      if (line.stream === 'system' && systemPastCap < SYSTEM_LINES_PAST_CAP) {
        systemPastCap += 1;
        out.push(line);
      }
    }
    return out;
  };

  const storedLines = async (): Promise<number> => {
    if (stored !== null) return stored;
    try {
      stored = await countRevisionLogs(db, revisionId, type);
    } catch (error) {
      // Counting only refines the cap; without it the log starts counting from here.
      logger.error({ err: error, revisionId, type }, 'could not count revision log lines');
      stored = 0;
    }
    // A build log an earlier attempt filled to its cap stays cut (without a second notice).
    if (type === 'build' && stored >= maxLines) capped = true;
    return stored;
  };

  const trim = async () => {
    try {
      await reports.trimLog(revisionId, type, maxLines);
      stored = Math.min(stored ?? 0, maxLines);
    } catch (error) {
      logger.error({ err: error, revisionId, type }, 'could not trim revision log');
    }
  };

  const writeBatch = async () => {
    const batch = pending.slice(0, INSERT_ROWS);
    pending = pending.slice(batch.length);
    if (dropped > 0 && pending.length === 0) {
      batch.push({
        stream: 'system',
        line: `${dropped} lines were not stored: output came faster than the log could be written.`,
        at: new Date(),
      });
      dropped = 0;
    }
    const already = await storedLines();
    const rows = applyBuildCap(batch, already);
    if (rows.length > 0) {
      try {
        await reports.appendLogLines(revisionId, type, rows);
        stored = already + rows.length;
      } catch (error) {
        logger.error(
          { err: error, revisionId, type, lines: rows.length },
          'could not store revision log lines; they are lost',
        );
      }
    }
    if (type === 'deploy' && (stored ?? 0) > maxLines + trimSlack) await trim();
  };

  /** Writes everything pending, one batch at a time; concurrent calls share the one running loop. */
  const kick = (): Promise<void> => {
    if (timer !== null) {
      clearTimeout(timer);
      timer = null;
    }
    // `running` must be assigned before the loop can clear it. Without the first await, a kick with
    // nothing pending (a timer that fires after the loop wrote its line, a flush of an idle log) ran the
    // loop and its `finally` synchronously, before the assignment, and left `running` a settled promise
    // for good: every later kick returned it and wrote nothing (issue 23, defect 8). With it, the last
    // check for pending lines and `running = null` happen in one synchronous step, so a line accepted
    // before a kick returned the running loop is always seen by that loop.
    if (running === null)
      running = (async () => {
        await Promise.resolve();
        try {
          while (pending.length > 0 || dropped > 0) await writeBatch();
        } catch (error) {
          // writeBatch handles the database's failures; this is a bug, and it must not reject a write().
          logger.error({ err: error, revisionId, type }, 'revision log writer failed; pending lines are lost');
          pending = [];
          dropped = 0;
        } finally {
          running = null;
        }
      })();
    return running;
  };

  return {
    write(stream, chunk) {
      if (closed) return;
      lines.write(stream, chunk);
    },
    system(line) {
      if (closed) return;
      lines.system(line);
    },
    tail(n) {
      return n <= 0 ? [] : recent.slice(-n);
    },
    async flush() {
      lines.endPartialLines();
      await kick();
    },
    close() {
      closing ??= (async () => {
        lines.endPartialLines();
        closed = true;
        await kick();
        if (type === 'deploy' && (stored ?? 0) > maxLines) await trim();
      })();
      return closing;
    },
  };
}
