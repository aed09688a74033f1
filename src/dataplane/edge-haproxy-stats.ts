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
  open(slug: string, backend: string, base: RawCounts): void;
  /**
   * A routed app moved to `backend` (a switch to new instances), whose counts are `base` now; the backend
   * it left still counts for it, its requests in flight included, until `retired`.
   */
  moved(slug: string, backend: string, base: RawCounts): void;
  /** A backend the app left has drained; `raw` its counts now (null when HAProxy did not answer). */
  retired(slug: string, backend: string, raw: RawCounts | null): void;
  /**
   * The counts of the routed apps (slug to backend), given what HAProxy counts now, or null when it did
   * not answer. Apps no longer routed are forgotten.
   */
  read(routes: ReadonlyMap<string, string>, raw: ReadonlyMap<string, RawCounts> | null): Map<string, EdgeAppStats>;
}

/** One backend's part in an app's counts. */
interface Held {
  /** The backend's counts when the app got it (in this process), or zero. */
  base: RawCounts;
  /** The counts last read from this process. */
  last: RawCounts | null;
}

interface Account {
  /** The HAProxy process whose counts the held backends' are. */
  generation: number;
  /** What earlier HAProxy processes, and backends the app has left, counted for it. */
  carried: RawCounts;
  /** The app's backend, and during a switch the one it left, still draining. */
  held: Map<string, Held>;
}

export function createEdgeAccounts(): EdgeAccounts {
  /** HAProxy processes started so far: each counts from zero. */
  let generation = 0;
  const accounts = new Map<string, Account>();
  const fresh = (backend: string, base: RawCounts): Account => ({
    generation,
    carried: zeroCounts(),
    held: new Map([[backend, { base, last: null }]]),
  });
  /** What a held backend counted for the app, up to its last read. */
  const counted = (held: Held) => subtractCounts(held.last ?? held.base, held.base);
  return {
    processStarted() {
      generation += 1;
    },
    open(slug, backend, base) {
      accounts.set(slug, fresh(backend, base));
    },
    moved(slug, backend, base) {
      const account = accounts.get(slug);
      if (account === undefined || account.generation !== generation) accounts.set(slug, fresh(backend, base));
      else account.held.set(backend, { base, last: null });
    },
    retired(slug, backend, raw) {
      const account = accounts.get(slug);
      const held = account?.held.get(backend);
      // After a restart of HAProxy the backend's counts were carried already (and it counts no more).
      if (account === undefined || held === undefined || account.generation !== generation) return;
      if (raw !== null) held.last = raw;
      account.carried = addCounts(account.carried, counted(held));
      account.held.delete(backend);
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
          account = fresh(backend, raw.get(backend) ?? zeroCounts());
          accounts.set(slug, account);
        }
        if (account.generation !== generation) {
          for (const held of account.held.values()) account.carried = addCounts(account.carried, counted(held));
          // The new process counts from zero, and has only the app's current backend.
          account.held = new Map([[backend, { base: zeroCounts(), last: null }]]);
          account.generation = generation;
        }
        if (!account.held.has(backend))
          account.held.set(backend, { base: raw?.get(backend) ?? zeroCounts(), last: null });
        let total = account.carried;
        let current = zeroCounts();
        for (const [name, held] of account.held) {
          const now = raw === null ? (held.last ?? held.base) : (raw.get(name) ?? zeroCounts());
          held.last = now;
          if (name === backend) current = now;
          total = addCounts(total, subtractCounts(now, held.base));
        }
        result.set(slug, {
          requests: total.requests,
          responses: total.responses,
          averageResponseSeconds: total.requests === 0 ? null : current.ttimeMs / 1000,
        });
      }
      for (const slug of accounts.keys()) if (!routes.has(slug)) accounts.delete(slug);
      return result;
    },
  };
}
