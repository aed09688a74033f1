/**
 * The HAProxy edge's per-app counts (src/dataplane/edge-haproxy.ts), kept apart from HAProxy itself so the
 * arithmetic is tested without a HAProxy: HAProxy counts per backend, from zero in each process it starts,
 * and a backend of its pool may have served a removed app before. An app's counts are therefore its
 * backend's since the app got it, plus what earlier HAProxy processes counted for it; while HAProxy does
 * not answer (it is being started again), the last counts read stand.
 */
import { emptyStats, STATUS_CLASSES, type EdgeAppStats, type StatusClass } from './edge-stats.ts';

/** A backend's counters in HAProxy (reset when HAProxy restarts); ttime: mean over its latest requests. */
export interface RawCounts {
  requests: number;
  responses: Record<StatusClass, number>;
  ttimeMs: number;
}

export function zeroCounts(): RawCounts {
  return { requests: 0, responses: emptyStats().responses, ttimeMs: 0 };
}

function combine(a: RawCounts, b: RawCounts, sign: 1 | -1): RawCounts {
  const responses = { ...a.responses };
  for (const c of STATUS_CLASSES) responses[c] = Math.max(0, a.responses[c] + sign * b.responses[c]);
  return { requests: Math.max(0, a.requests + sign * b.requests), responses, ttimeMs: a.ttimeMs };
}

const addCounts = (a: RawCounts, b: RawCounts) => combine(a, b, 1);
const subtractCounts = (a: RawCounts, b: RawCounts) => combine(a, b, -1);

/** Each backend's counts from the CSV of HAProxy's `show stat` (its BACKEND rows). */
export function parseBackendCounts(csv: string): Map<string, RawCounts> {
  const lines = csv.split('\n');
  const header = lines[0]!.replace(/^# /, '').split(',');
  const at = (name: string) => header.indexOf(name);
  const counts = new Map<string, RawCounts>();
  for (const row of lines.slice(1)) {
    const fields = row.split(',');
    if (fields[at('svname')] !== 'BACKEND') continue;
    const number = (name: string) => Number(fields[at(name)] || 0);
    counts.set(fields[at('pxname')]!, {
      requests: number('req_tot'),
      responses: {
        '1xx': number('hrsp_1xx'),
        '2xx': number('hrsp_2xx'),
        '3xx': number('hrsp_3xx'),
        '4xx': number('hrsp_4xx'),
        '5xx': number('hrsp_5xx'),
        other: number('hrsp_other'),
      },
      ttimeMs: number('ttime'),
    });
  }
  return counts;
}

export interface EdgeAccounts {
  /** A new HAProxy process was started: it counts from zero, so the counts so far are carried. */
  processStarted(): void;
  /** An app got `backend`, whose counts are `base` now (they may be an earlier app's): counted from there. */
  open(slug: string, base: RawCounts): void;
  /**
   * The counts of the routed apps (slug to backend), given what HAProxy counts now, or null when it did
   * not answer. Apps no longer routed are forgotten.
   */
  read(routes: ReadonlyMap<string, string>, raw: ReadonlyMap<string, RawCounts> | null): Map<string, EdgeAppStats>;
}

interface Account {
  /** The HAProxy process whose counts `base` and `last` are. */
  generation: number;
  /** The backend's counts when the app got it (in this process), or zero. */
  base: RawCounts;
  /** What earlier HAProxy processes counted for the app. */
  carried: RawCounts;
  /** The counts last read from this process. */
  last: RawCounts | null;
}

export function createEdgeAccounts(): EdgeAccounts {
  /** HAProxy processes started so far: each counts from zero. */
  let generation = 0;
  const accounts = new Map<string, Account>();
  return {
    processStarted() {
      generation += 1;
    },
    open(slug, base) {
      accounts.set(slug, { generation, base, carried: zeroCounts(), last: null });
    },
    read(routes, raw) {
      const result = new Map<string, EdgeAppStats>();
      for (const [slug, backend] of routes) {
        let account = accounts.get(slug);
        if (account === undefined) {
          // Not read yet: none to tell until HAProxy answers (its backend may hold an earlier app's counts).
          if (raw === null) {
            result.set(slug, emptyStats());
            continue;
          }
          // Routed before its first read (or by a restart with a bigger pool): counted from here.
          account = { generation, base: raw.get(backend) ?? zeroCounts(), carried: zeroCounts(), last: null };
          accounts.set(slug, account);
        }
        if (account.generation !== generation) {
          if (account.last) account.carried = addCounts(account.carried, subtractCounts(account.last, account.base));
          account.base = zeroCounts();
          account.last = null;
          account.generation = generation;
        }
        const now = raw === null ? (account.last ?? account.base) : (raw.get(backend) ?? zeroCounts());
        account.last = now;
        const total = addCounts(account.carried, subtractCounts(now, account.base));
        result.set(slug, {
          requests: total.requests,
          responses: total.responses,
          averageResponseSeconds: total.requests === 0 ? null : now.ttimeMs / 1000,
        });
      }
      for (const slug of accounts.keys()) if (!routes.has(slug)) accounts.delete(slug);
      return result;
    },
  };
}
