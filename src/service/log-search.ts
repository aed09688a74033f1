/**
 * The log search of LangChain's `langgraph deploy logs` (src/routes/langgraph-compat.ts), read into
 * the store's LogSearch: its level words, its ISO 8601 times, and its page offsets. An offset is the id
 * of the last line of the previous page, wrapped so that clients treat it as opaque. Each refusal is a
 * 422 at the body field the CLI sent.
 */
import { ValidationError } from '../errors.ts';
import { LOG_LEVELS, type LogLevel, type LogSearch } from '../store/revision-logs.ts';

export { LOG_LEVELS };

/** The search as the CLI sends it; every field is optional. */
export interface LogSearchAsked {
  order?: 'asc' | 'desc';
  limit?: number;
  offset?: string | null;
  level?: string | null;
  query?: string | null;
  start_time?: string | null;
  end_time?: string | null;
}

const OFFSET_PREFIX = 'lg:';
const OFFSET_ID = /^(0|[1-9][0-9]{0,18})$/;
const MAX_ID = 9223372036854775807n;

export const encodeLogOffset = (id: string): string => Buffer.from(`${OFFSET_PREFIX}${id}`).toString('base64url');

function decodeOffset(offset: string): string {
  if (/^[A-Za-z0-9_-]{1,200}$/.test(offset)) {
    const text = Buffer.from(offset, 'base64url').toString('utf8');
    const id = text.startsWith(OFFSET_PREFIX) ? text.slice(OFFSET_PREFIX.length) : '';
    if (OFFSET_ID.test(id) && BigInt(id) <= MAX_ID && encodeLogOffset(id) === offset) return id;
  }
  throw new ValidationError([
    {
      type: 'value_error',
      loc: ['body', 'offset'],
      msg: 'Value error, not an offset returned by this endpoint: pass next_offset unchanged',
      input: offset,
    },
  ]);
}

// ISO 8601 as the CLI's --start-time / --end-time take it; without a zone it is UTC.
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$/i;

function parseTime(value: string, field: string): Date {
  const match = ISO_TIME.exec(value.trim());
  const at = match ? Date.parse(match[1] || !value.includes(':') ? value.trim() : `${value.trim()}Z`) : Number.NaN;
  if (Number.isNaN(at)) {
    throw new ValidationError([
      {
        type: 'datetime_parsing',
        loc: ['body', field],
        msg: 'Input should be an ISO 8601 date-time, e.g. 2026-03-08T00:00:00Z',
        input: value,
      },
    ]);
  }
  return new Date(at);
}

const isLogLevel = (level: string): level is LogLevel => (LOG_LEVELS as readonly string[]).includes(level);

/** The search the CLI asked for, checked field by field in the order it lists them. */
export function readLogSearch(asked: LogSearchAsked): LogSearch {
  const level = asked.level ? asked.level.toUpperCase() : null;
  if (level !== null && !isLogLevel(level)) {
    throw new ValidationError([
      {
        type: 'enum',
        loc: ['body', 'level'],
        msg: `Input should be ${LOG_LEVELS.map((l) => `'${l}'`).join(', ')}`,
        input: asked.level,
      },
    ]);
  }
  const fromId = asked.offset ? decodeOffset(asked.offset) : null;
  const since = asked.start_time ? parseTime(asked.start_time, 'start_time') : undefined;
  const until = asked.end_time ? parseTime(asked.end_time, 'end_time') : undefined;
  return {
    order: asked.order ?? 'desc',
    fromId,
    limit: asked.limit ?? 100,
    level: level ?? undefined,
    contains: asked.query || undefined,
    since,
    until,
  };
}
