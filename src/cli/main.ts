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

const runtime: CliRuntime = {
  environment: readEnvironment(),
  streams: { stdout: process.stdout, stderr: process.stderr },
  version: packageJson.version,
  lastUrl: null,
};
const output = new Output(runtime.streams, { json: false, noColor: runtime.environment.noColor });

process.on('SIGINT', () => {
  output.note('\nInterrupted. What the service was already asked to do goes on there.');
  process.exit(EXIT.interrupted);
});

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
