/**
 * The suite's one way to wait for something, and the one limit on how long a test may take.
 *
 * - `eventually(what, check, options)`: re-runs `check` until it gives something truthy and resolves with it.
 * - `PER_TEST`: the `{ timeout }` option every test that can wait is declared with, so a hang fails that test
 *   by name within `TEST_SECONDS` instead of the whole file at the runner's file limit.
 * - `pause(ms, why)`: the one fixed pause, for a scenario that is "time passes and nothing happens" or
 *   that gives another party a moment it cannot be watched taking; it says why, and is short
 *   (`MAX_PAUSE_MS`). A test that waits for time to pass to see something expire moves a clock instead
 *   (support/clock.ts).
 *
 * test/test-rules.test.ts keeps it so: no other sleep, and no polling loop of its own, in test/.
 *
 * Both are hang guards, never timing assertions: a slow machine may take longer than usual, so the limits
 * are generous, and a test never asserts how long something took.
 */
import { inspect } from 'node:util';

/** How long `eventually` waits by default before it calls the test hung, in seconds. */
export const WAIT_SECONDS = 120;

/** How long one test may take at most, in seconds (its waits included, several of them in a row). */
export const TEST_SECONDS = 300;

/**
 * The most a test (or a describe) may give itself as its own `timeout`, in seconds: a build or an npm
 * install inside the test may need more than `TEST_SECONDS` on a busy machine, never more than this.
 * scripts/run-tests.ts's limit per file is above it, so a hung test is named by its own limit first.
 */
export const MAX_TEST_SECONDS = 600;

/** The `{ timeout }` option of every test that can wait: `test('name', PER_TEST, async () => ...)`. */
export const PER_TEST = { timeout: TEST_SECONDS * 1000 } as const;

/**
 * The longest `pause`: a longer wait for time to pass belongs to a clock, or to `eventually`. Pauses over
 * a second are windows of real time that another process needs (its own timers, a measuring window).
 */
export const MAX_PAUSE_MS = 3_500;

/**
 * Lets `ms` milliseconds pass (at most `MAX_PAUSE_MS`), for a reason that says why no condition can be
 * waited for instead: "nothing happens meanwhile" is the scenario, or the other party's step cannot be
 * seen. Not a way to wait for something: that is `eventually`.
 */
export async function pause(ms: number, why: string): Promise<void> {
  if (ms > MAX_PAUSE_MS) throw new Error(`pause(${ms} ms) for "${why}": at most ${MAX_PAUSE_MS} ms; use a clock`);
  await new Promise((resolve) => setTimeout(resolve, ms));
}

export interface WaitOptions {
  /** The deadline in seconds (default `WAIT_SECONDS`): a hang guard, not a timing assertion. */
  seconds?: number;
  /** The pause between two checks, in milliseconds (default 100). */
  everyMs?: number;
  /** What the failure says the test last saw (default: the last value or error `check` gave). */
  describe?: () => string;
  /**
   * Whether an error thrown by `check` only means "not yet" (a server that does not listen yet), so the
   * wait goes on and a failure reports the last one. By default an error fails the wait at once: a check
   * throws to say that what it waits for will never come (the process it watches exited, say).
   */
  retryErrors?: boolean;
  /**
   * Wakes the wait as soon as something may have changed (an event), besides the regular checks: called
   * once with a function to call on each change, it returns how to stop. A synchronous `check` then
   * runs right at the change, so a state that holds only for a moment is seen too.
   */
  wake?: (recheck: () => void) => () => void;
}

type Falsy = undefined | null | false | '' | 0;

/**
 * Re-runs `check` until it returns (or resolves to) something truthy, and resolves with that value; an
 * error thrown by `check` fails the wait unless `retryErrors`. Past the deadline (`seconds`) it rejects,
 * naming `what` and what it last saw, even when a check is still pending: the deadline only exists so
 * that a hung test fails saying what it waited for, it is not a timing assertion.
 */
export function eventually<T>(
  what: string,
  check: () => T | Falsy | Promise<T | Falsy>,
  options: WaitOptions = {},
): Promise<T> {
  const seconds = options.seconds ?? WAIT_SECONDS;
  const everyMs = options.everyMs ?? 100;
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let checking = false;
    let again = false;
    let last = 'no check has finished';
    let pause: NodeJS.Timeout | undefined;
    let unsubscribe: (() => void) | undefined;
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(pause);
      clearTimeout(deadline);
      unsubscribe?.();
      outcome();
    };
    const seen = (value: unknown) => {
      if (settled) return;
      if (value) finish(() => resolve(value as T));
      else last = `the check gave ${inspect(value, { depth: 4, breakLength: Infinity })}`;
    };
    const failed = (error: unknown) => {
      if (!options.retryErrors) finish(() => reject(error instanceof Error ? error : new Error(inspect(error))));
      else last = `the check failed: ${error instanceof Error ? error.message : inspect(error)}`;
    };
    const next = () => {
      checking = false;
      if (settled) return;
      if (again) {
        again = false;
        attempt();
      } else pause = setTimeout(attempt, everyMs);
    };
    const attempt = () => {
      if (settled) return;
      if (checking) {
        // A change while an asynchronous check runs: check once more right after it.
        again = true;
        return;
      }
      clearTimeout(pause);
      checking = true;
      let result: T | Falsy | Promise<T | Falsy>;
      try {
        result = check();
      } catch (error) {
        failed(error);
        next();
        return;
      }
      if (result instanceof Promise) {
        result.then(seen, failed).finally(next);
      } else {
        seen(result);
        next();
      }
    };
    const deadline = setTimeout(() => {
      const saw = options.describe ? safely(options.describe) : last;
      finish(() =>
        reject(
          new Error(
            `still waiting for ${what} after ${seconds} s (a hang guard: the test is stuck). Last seen: ${saw}`,
          ),
        ),
      );
    }, seconds * 1000);
    if (options.wake) unsubscribe = options.wake(attempt);
    attempt();
  });
}

function safely(describe: () => string): string {
  try {
    return describe();
  } catch (error) {
    return `(describing failed: ${String(error)})`;
  }
}
