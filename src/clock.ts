/**
 * The time, where it decides something a test must see change without waiting for it: deadlines, the
 * expiry of OAuth tokens, the storage measures' dates. A module that reads it takes a `Clock` (through
 * `AppDeps.now` and `createServices`, or its own options) and uses `systemClock` when given none; a test
 * passes one it moves (test/support/clock.ts). Leases (src/store/work-leases.ts) are dated by
 * PostgreSQL's `now()`, one time for every node sharing the database, unless their owner carries a
 * `clock`: a test gives its workers one it moves to make a lease run out.
 */
export type Clock = () => Date;

/** The real time. */
export const systemClock: Clock = () => new Date();
