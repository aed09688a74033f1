/**
 * The time, where it decides something a test must see change without waiting for it: deadlines, the
 * expiry of OAuth tokens, the storage measures' dates. A module that reads it takes a `Clock` (through
 * `AppDeps.now` and `createServices`, or its own options) and uses `systemClock` when given none; a test
 * passes one it moves (test/support/clock.ts). Leases are dated by PostgreSQL's `now()` instead: a test
 * dates the row back.
 */
export type Clock = () => Date;

/** The real time. */
export const systemClock: Clock = () => new Date();
