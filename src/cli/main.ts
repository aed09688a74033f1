/**
 * `slipway`, the command line (docs/cli.md): parse the line, run the command, and turn whatever went
 * wrong into one message and an exit code; a stack trace only with SLIPWAY_DEBUG=1.
 */
import fs from 'node:fs';
import { CommanderError } from 'commander';
import { readEnvironment } from './cli-config.ts';
import type { CliRuntime } from './cli-context.ts';
import { describeFailure, EXIT } from './cli-errors.ts';
import { Output } from './cli-output.ts';
import { buildProgram } from './cli-program.ts';

const packageJson = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

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
  version: packageJson.version,
  lastUrl: null,
  handOverSignals: () => process.off('SIGINT', onInterrupt),
};

async function main(): Promise<number> {
  try {
    await buildProgram(runtime).parseAsync(process.argv);
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
}

const code = await main();
// Let what was written reach the pipe before exiting (idle keep-alive connections would otherwise hold the process).
process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
