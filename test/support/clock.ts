/**
 * A clock a test moves forward instead of sleeping to see time pass (an access token expiring, a
 * deadline passing): the real time plus what the test added. Pass `now` where the code takes a `Clock`
 * (src/clock.ts: AppDeps.now, the sweepers' `now` options).
 */
import type { Clock } from '../../src/clock.ts';

export interface TestClock {
  readonly now: Clock;
  /** Moves the clock `ms` milliseconds ahead of the real time, on top of earlier moves. */
  advance(ms: number): void;
}

export function createTestClock(): TestClock {
  let aheadMs = 0;
  return {
    now: () => new Date(Date.now() + aheadMs),
    advance(ms) {
      aheadMs += ms;
    },
  };
}
