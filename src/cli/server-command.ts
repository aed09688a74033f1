/** `slipway server`: the service itself, exactly what `npm start` runs (configured by environment variables, see README). */
import { Command } from 'commander';
import { withExample, type CliRuntime } from '@slipway/cli';

export function serverCommand(runtime: CliRuntime): Command {
  return withExample(
    new Command('server').description(
      'Start the Slipway service (API, data plane and app proxy) in the foreground; configured by environment variables (README, "Configuration")',
    ),
    ['slipway server', 'PORT=9000 DATABASE_URL=postgres://... SLIPWAY_ENCRYPTION_KEY=... slipway server'],
  ).action(async () => {
    // The service's entry point starts on import and owns the process from then on (signals, exit):
    // its SIGINT handler shuts down gracefully, which the CLI's exit-at-once handler would cut short.
    runtime.handOverSignals();
    await import('../main.ts');
    // Never settles: the service keeps running until a signal stops it, and exits the process itself.
    await new Promise<never>(() => undefined);
  });
}
