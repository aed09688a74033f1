// Small pieces every part of the state layer uses: ids, waiting, auth filters as SQL, and rows as the
// records LangGraph's API answers.
import { randomBytes } from 'node:crypto';

/** A UUID v7 (time-ordered), as the in-memory server makes thread ids. */
export function uuid7() {
  const bytes = randomBytes(16);
  const now = BigInt(Date.now());
  for (let i = 0; i < 6; i += 1) bytes[i] = Number((now >> BigInt(8 * (5 - i))) & 0xffn);
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Malformed input from a client answers what LangChain's in-memory server answers (docs/langgraph.md,
// "Malformed ids and filters"), never PostgreSQL's error as a 500. Its store is a map keyed by canonical
// ids and its filters compare in JavaScript: an id that is not a UUID is simply not found, and a filter
// holding what PostgreSQL cannot store matches nothing.
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `value` is a UUID as the server makes them (PostgreSQL's uuid type would refuse anything else). */
export const isUuid = (value) => typeof value === 'string' && UUID.test(value);

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Whether PostgreSQL's text and jsonb can hold `value` (a string, or JSON with its keys): no NUL and no
 * lone UTF-16 surrogate. Nothing stored holds one, so a filter that does matches nothing.
 */
export function storable(value) {
  const stack = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item === 'string') {
      if (item.includes('\u0000') || LONE_SURROGATE.test(item)) return false;
    } else if (item !== null && typeof item === 'object') {
      for (const [key, child] of Object.entries(item)) {
        if (key.includes('\u0000') || LONE_SURROGATE.test(key)) return false;
        stack.push(child);
      }
    }
  }
  return true;
}

/**
 * A limit or offset as SQL takes it: a whole number, at least 0 (PostgreSQL refuses a negative or
 * fractional one). The in-memory server slices an array with it, where -1 counts from the end; a
 * negative value is taken as 0 here rather than copying that (docs/langgraph.md).
 */
export function sqlCount(value, fallback) {
  const number = Number(value ?? fallback);
  return Number.isFinite(number) ? Math.max(0, Math.trunc(number)) : fallback;
}
export const isFinal = (status) => status !== 'pending' && status !== 'running';

/** Custom auth filters (`{key: value}`, `{key: {$eq}}`, `{key: {$contains}}`) as SQL on a jsonb column. */
export function authFilterSql(column, filters, params) {
  if (filters == null) return 'true';
  const parts = [];
  for (const [key, value] of Object.entries(filters)) {
    if (value !== null && typeof value === 'object' && '$contains' in value) {
      const wanted = Array.isArray(value.$contains) ? value.$contains : [value.$contains];
      params.push(key, JSON.stringify(wanted));
      const field = `${column} -> $${params.length - 1}`;
      parts.push(`(jsonb_typeof(${field}) = 'array' and ${field} @> $${params.length}::jsonb)`);
    } else {
      const wanted = value !== null && typeof value === 'object' && '$eq' in value ? value.$eq : value;
      params.push(key, JSON.stringify(wanted));
      parts.push(`${column} -> $${params.length - 1} = $${params.length}::jsonb`);
    }
  }
  return parts.length > 0 ? parts.join(' and ') : 'true';
}

export const assistantOf = (row) => ({
  assistant_id: row.assistant_id,
  graph_id: row.graph_id,
  name: row.name ?? row.graph_id,
  description: row.description ?? null,
  config: row.config ?? {},
  context: row.context ?? {},
  metadata: row.metadata ?? {},
  version: row.version,
  created_at: row.created_at,
  updated_at: row.updated_at,
});
export const threadOf = (row) => ({
  thread_id: row.thread_id,
  created_at: row.created_at,
  updated_at: row.updated_at,
  metadata: row.metadata ?? {},
  config: row.config ?? {},
  status: row.status,
  values: row.values ?? undefined,
  interrupts: row.interrupts ?? undefined,
});
export const runOf = (row) => ({
  run_id: row.run_id,
  thread_id: row.thread_id,
  assistant_id: row.assistant_id,
  created_at: row.created_at,
  updated_at: row.updated_at,
  status: row.status,
  metadata: row.metadata ?? {},
  kwargs: row.kwargs ?? {},
  multitask_strategy: row.multitask_strategy,
});
