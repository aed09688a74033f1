/**
 * `npm run listener` (or the `slipway-listener` bin, or the image's bundle of `npm run build:listener`):
 * the Kubernetes listener agent. Configured by environment (config.ts, docs/listener.md); stops cleanly
 * on SIGTERM, as a pod is stopped.
 */
import { ListenerConfigError, loadListenerConfig } from './config.ts';
import { startListener } from './listener-agent.ts';

function main(): void {
  let config;
  try {
    config = loadListenerConfig(process.env);
  } catch (error) {
    if (error instanceof ListenerConfigError) {
      process.stderr.write(`slipway-listener: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const listener = startListener(config);
  let stopping = false;
  const shutdown = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    listener.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(
          `slipway-listener: stopping after ${signal} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
        );
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

main();
