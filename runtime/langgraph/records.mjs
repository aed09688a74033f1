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
