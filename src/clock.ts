/**
 * The time, where it decides something a test must see change without waiting for it: deadlines, the
 * expiry of OAuth tokens, the storage measures' dates. A module that reads it takes a `Clock` (through
 * `AppDeps.now` and `createServices`, or its own options) and uses `systemClock` when given none; a test
 * passes one it moves (test/support/clock.ts). Leases (src/store/work-leases.ts), idempotency keys
 * (src/store/idempotency-keys.ts), upload URLs (src/store/upload-tokens.ts), OAuth authorizations
 * (src/store/oauth-authorizations.ts), the retention sweep's ages (src/pipeline/retention.ts), a
 * listener's last call and state, connected or stale (src/store/listeners.ts, and the gauges of
 * src/store/metrics.ts with the work queue's age) and dashboard sign-in sessions (src/sso/sso-store.ts) are
 * dated by PostgreSQL's `now()`, one time for every node sharing the database, unless they are given a
 * clock (src/store/sql-now.ts): a test gives one it moves to make a lease or a key run out, a listener go
 * stale or a session expire.
 */
export type Clock = () => Date;

/** The real time. */
export const systemClock: Clock = () => new Date();
