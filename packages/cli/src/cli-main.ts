/**
 * `slipway`, the command line (docs/cli.md): parse the line, run the command, and turn whatever went
 * wrong into one message and an exit code; a stack trace only with SLIPWAY_DEBUG=1. The process's
 * entry point (the service's src/cli/main.ts) calls `runCli` with the version and the command tree.
 */
import { CommanderError, type Command } from 'commander';
import { readEnvironment } from './cli-config.ts';
import type { CliRuntime } from './cli-context.ts';
import { describeFailure, EXIT } from './cli-errors.ts';
import { Output } from './cli-output.ts';
import { buildProgram } from './cli-program.ts';

export interface CliOptions {
  /** Printed by --version and sent as the User-Agent. */
  version: string;
  /** The command tree; the client commands alone by default. */
  program?: (runtime: CliRuntime) => Command;
}

/** Runs the command line of `process.argv` and exits the process with its exit code. */
export async function runCli(options: CliOptions): Promise<never> {
  const environment = readEnvironment();
  const output = new Output(
    { stdout: process.stdout, stderr: process.stderr },
    { json: false, noColor: environment.noColor },
  );

  const onInterrupt = () => {
    output.note('\nInterrupted. What the service was already asked to do goes on there.');
    process.exit(EXIT.interrupted);
  };
  process.on('SIGINT', onInterrupt);

  const runtime: CliRuntime = {
    environment,
    streams: { stdout: process.stdout, stderr: process.stderr },
    version: options.version,
    lastUrl: null,
    handOverSignals: () => process.off('SIGINT', onInterrupt),
  };
  const program = options.program ?? buildProgram;

  const code = await (async (): Promise<number> => {
    try {
      await program(runtime).parseAsync(process.argv);
      return EXIT.ok;
    } catch (error) {
      if (error instanceof CommanderError) {
        // Commander printed its message (or the help) already.
        return error.code === 'commander.helpDisplayed' || error.code === 'commander.version' ? EXIT.ok : EXIT.usage;
      }
      const failure = describeFailure(error, runtime.lastUrl);
      output.error(failure.message, failure.details);
      if (runtime.environment.debug && error instanceof Error && error.stack) output.note(error.stack);
      return failure.exitCode;
    }
  })();
  // Let what was written reach the pipe before exiting (idle keep-alive connections would otherwise hold the process).
  return new Promise<never>(() => process.stdout.write('', () => process.stderr.write('', () => process.exit(code))));
}
