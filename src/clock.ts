/**
 * The time, where it decides something a test must see change without waiting for it: deadlines, the
 * expiry of OAuth tokens, the storage measures' dates. A module that reads it takes a `Clock` (through
 * `AppDeps.now` and `createServices`, or its own options) and uses `systemClock` when given none; a test
 * passes one it moves (test/support/clock.ts). Leases (src/store/work-leases.ts), idempotency keys
 * (src/store/idempotency-keys.ts), upload URLs (src/store/upload-tokens.ts), OAuth authorizations
 * (src/store/oauth-authorizations.ts) and the retention sweep's ages (src/pipeline/retention.ts) are
 * dated by PostgreSQL's `now()`, one time for every node sharing the database, unless they are given a
 * clock (src/store/sql-now.ts): a test gives one it moves to make a lease or a key run out.
 */
export type Clock = () => Date;

/** The real time. */
export const systemClock: Clock = () => new Date();
