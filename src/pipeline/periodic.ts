/**
 * A background task run every `intervalMs`, one run at a time (a slow run delays the next instead of
 * overlapping it); `stop` waits for the run in progress. A failed run is logged and the next one
 * retries: sweeps are written so that a failure leaves nothing half done.
 */
import type { Logger } from 'pino';

export interface Periodic {
  stop(): Promise<void>;
}

export function startPeriodic(options: {
  name: string;
  intervalMs: number;
  logger: Pick<Logger, 'error'>;
  runAtStart?: boolean;
  run: () => Promise<void>;
}): Periodic {
  const { name, intervalMs, logger, run } = options;
  const once = async () => {
    try {
      await run();
    } catch (error) {
      logger.error({ err: error }, `${name} failed; the next run retries`);
    }
  };
  let running: Promise<void> = options.runAtStart ? once() : Promise.resolve();
  const timer = setInterval(() => {
    running = running.then(once);
  }, intervalMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
