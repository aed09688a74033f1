/**
 * The time a store's SQL dates and judges rows by (src/clock.ts). Without a clock it is PostgreSQL's
 * `now()`, one time for every replica that shares the database (the service's own setting); with one, the
 * clock's time goes in as a parameter, so that a test moves it to make a lease or a key run out instead of
 * waiting or dating rows back.
 */
import { sql, type RawBuilder } from 'kysely';
import type { Clock } from '../clock.ts';

/** The clock's time read once (every use of the result is that same time), or the database's `now()`. */
export function sqlNow(clock: Clock | undefined): RawBuilder<Date> {
  return clock === undefined ? sql<Date>`now()` : sql<Date>`${clock()}::timestamptz`;
}
