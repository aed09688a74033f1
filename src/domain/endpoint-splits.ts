/**
 * Traffic splits on endpoints (docs/app-urls.md, "Traffic split" and "Automatic rollback"). Pure rules:
 * the weight, the rollback's settings with their defaults and bounds, and the rollback's verdict from two
 * revisions' edge numbers over its window.
 */

/** The automatic rollback of a traffic split (docs/app-urls.md, "Automatic rollback"). */
export interface SplitRollbackSettings {
  /** B is rolled back when its 5xx rate exceeds A's by more than this (a fraction, 0-1). */
  max_error_rate_increase: number;
  /** ... or its p99 exceeds A's by more than this many milliseconds; null: latency not compared. */
  max_p99_increase_ms: number | null;
  window_seconds: number;
  /** Requests B must have had in the window before anything is decided. */
  min_requests: number;
}

export const MIN_SPLIT_WEIGHT = 1;
export const MAX_SPLIT_WEIGHT = 99;

/** The rollback's window: long enough to see a trend, short enough for the edge's hour of series. */
export const ROLLBACK_WINDOW_MIN_SECONDS = 30;
export const ROLLBACK_WINDOW_MAX_SECONDS = 1800;

export const DEFAULT_ROLLBACK: SplitRollbackSettings = {
  max_error_rate_increase: 0.05,
  max_p99_increase_ms: null,
  window_seconds: 300,
  min_requests: 50,
};

/** Fewer requests than this in the window never decide: 3 failures out of 3 say little. */
export const MIN_ROLLBACK_REQUESTS = 20;

export interface RollbackInput {
  max_error_rate_increase?: number | undefined;
  max_p99_increase_ms?: number | null | undefined;
  window_seconds?: number | undefined;
  min_requests?: number | undefined;
}

/** The settings with their defaults filled in, or why they cannot be (the field named). */
export function rollbackSettings(input: RollbackInput): SplitRollbackSettings | string {
  const settings = {
    max_error_rate_increase: input.max_error_rate_increase ?? DEFAULT_ROLLBACK.max_error_rate_increase,
    max_p99_increase_ms:
      input.max_p99_increase_ms === undefined ? DEFAULT_ROLLBACK.max_p99_increase_ms : input.max_p99_increase_ms,
    window_seconds: input.window_seconds ?? DEFAULT_ROLLBACK.window_seconds,
    min_requests: input.min_requests ?? DEFAULT_ROLLBACK.min_requests,
  };
  const rate = settings.max_error_rate_increase;
  if (!Number.isFinite(rate) || rate < 0 || rate > 1)
    return 'rollback.max_error_rate_increase must be a fraction from 0 to 1 (0.05: five points more 5xx than the base)';
  const p99 = settings.max_p99_increase_ms;
  if (p99 !== null && (!Number.isInteger(p99) || p99 < 1 || p99 > 600_000))
    return 'rollback.max_p99_increase_ms must be a whole number of milliseconds from 1 to 600000, or null';
  const window = settings.window_seconds;
  if (!Number.isInteger(window) || window < ROLLBACK_WINDOW_MIN_SECONDS || window > ROLLBACK_WINDOW_MAX_SECONDS)
    return `rollback.window_seconds must be a whole number from ${ROLLBACK_WINDOW_MIN_SECONDS} to ${ROLLBACK_WINDOW_MAX_SECONDS}`;
  const min = settings.min_requests;
  if (!Number.isInteger(min) || min < MIN_ROLLBACK_REQUESTS || min > 1_000_000)
    return `rollback.min_requests must be a whole number from ${MIN_ROLLBACK_REQUESTS} to 1000000`;
  return settings;
}

/** Why the weight cannot be a split's; null when it can. */
export function splitWeightProblem(weight: unknown): string | null {
  if (typeof weight !== 'number' || !Number.isInteger(weight) || weight < MIN_SPLIT_WEIGHT || weight > MAX_SPLIT_WEIGHT)
    return `weight must be a whole number of percent from ${MIN_SPLIT_WEIGHT} to ${MAX_SPLIT_WEIGHT}`;
  return null;
}

/** One revision's numbers at the edge over the rollback's window. */
export interface RevisionNumbers {
  requests: number;
  /** The app's 5xx and the edge's own failures for it (no instance answered). */
  serverErrors: number;
  /** Seconds; null without requests. */
  p99: number | null;
}

export interface RollbackVerdict {
  reason: 'error_rate' | 'latency';
  /** Said in the event, with the numbers. */
  message: string;
  base: { requests: number; error_rate: number; p99_ms: number | null };
  split: { requests: number; error_rate: number; p99_ms: number | null };
}

const rateOf = (n: RevisionNumbers) => (n.requests === 0 ? 0 : n.serverErrors / n.requests);
const ms = (seconds: number | null) => (seconds === null ? null : Math.round(seconds * 1000));

/**
 * Whether the split's revision (`split`) is worse than the base (`base`) by more than the settings allow.
 * Null while the split's revision has had fewer than min_requests in the window, or when it is not worse.
 */
export function rollbackVerdict(
  base: RevisionNumbers,
  split: RevisionNumbers,
  settings: SplitRollbackSettings,
): RollbackVerdict | null {
  if (split.requests < settings.min_requests) return null;
  const numbers = {
    base: { requests: base.requests, error_rate: rateOf(base), p99_ms: ms(base.p99) },
    split: { requests: split.requests, error_rate: rateOf(split), p99_ms: ms(split.p99) },
  };
  const increase = numbers.split.error_rate - numbers.base.error_rate;
  if (increase > settings.max_error_rate_increase)
    return {
      reason: 'error_rate',
      message:
        `5xx rate ${(numbers.split.error_rate * 100).toFixed(1)}% over ${split.requests} requests against ` +
        `${(numbers.base.error_rate * 100).toFixed(1)}% over ${base.requests} for the base revision ` +
        `(more than ${(settings.max_error_rate_increase * 100).toFixed(1)} points above it)`,
      ...numbers,
    };
  const limit = settings.max_p99_increase_ms;
  if (limit !== null && numbers.split.p99_ms !== null && base.requests >= settings.min_requests) {
    const over = numbers.split.p99_ms - (numbers.base.p99_ms ?? 0);
    if (over > limit)
      return {
        reason: 'latency',
        message:
          `p99 ${numbers.split.p99_ms} ms over ${split.requests} requests against ${numbers.base.p99_ms ?? 0} ms ` +
          `for the base revision (more than ${limit} ms above it)`,
        ...numbers,
      };
  }
  return null;
}
