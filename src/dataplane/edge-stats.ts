/**
 * What an app edge counts for each app (per-deployment metrics on /metrics, src/routes/metrics.ts):
 * requests and responses by status class since the app got its route, and the average time of its
 * latest responses. Both edges give the same shape: HAProxy from its runtime statistics, the built-in
 * edge from its own count.
 */
export const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx', 'other'] as const;
export type StatusClass = (typeof STATUS_CLASSES)[number];

export interface EdgeAppStats {
  /** Requests the edge received for the app (counter). */
  requests: number;
  /** Responses by status class (counters), the edge's own answers (502, 503) included. */
  responses: Record<StatusClass, number>;
  /** Mean time from request to the response's end over the latest (up to 1024) requests; null: none yet. */
  averageResponseSeconds: number | null;
}

export function statusClass(status: number): StatusClass {
  return status >= 100 && status < 600 ? (`${Math.floor(status / 100)}xx` as StatusClass) : 'other';
}

export function emptyStats(): EdgeAppStats {
  return {
    requests: 0,
    responses: { '1xx': 0, '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0, other: 0 },
    averageResponseSeconds: null,
  };
}

/** How many of the latest responses the average covers (HAProxy's own window). */
const WINDOW = 1024;

/** The built-in edge's count of one app. */
export function createStatsCounter(): { record(status: number, seconds: number): void; read(): EdgeAppStats } {
  const stats = emptyStats();
  const times = new Float64Array(WINDOW);
  let seen = 0;
  let sum = 0;
  return {
    record(status, seconds) {
      stats.requests += 1;
      stats.responses[statusClass(status)] += 1;
      const at = seen % WINDOW;
      if (seen >= WINDOW) sum -= times[at]!;
      times[at] = seconds;
      sum += seconds;
      seen += 1;
    },
    read: () => ({
      requests: stats.requests,
      responses: { ...stats.responses },
      averageResponseSeconds: seen === 0 ? null : Math.max(0, sum) / Math.min(seen, WINDOW),
    }),
  };
}
