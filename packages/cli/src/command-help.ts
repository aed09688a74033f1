/**
 * What every command shares: examples at the end of its `--help`, and the wrapper that gives its
 * action a context (output, client) from the parsed command line.
 */
import type { Command } from 'commander';
import { createContext, type CliContext, type CliRuntime } from './cli-context.ts';

/** Wraps a command action: commander passes the arguments, the options, then the command itself. */
export type ActionRunner = <A extends unknown[]>(
  action: (ctx: CliContext, ...args: A) => Promise<void>,
) => (...args: unknown[]) => Promise<void>;

export function actionRunner(runtime: CliRuntime): ActionRunner {
  return <A extends unknown[]>(action: (ctx: CliContext, ...args: A) => Promise<void>) =>
    async (...args: unknown[]) => {
      const command = args.at(-1) as Command;
      // Commander's own argument and option values, in the order the action declares them.
      await action(createContext(runtime, command), ...(args.slice(0, -1) as A));
    };
}

/** Adds "Examples:" to the command's help. */
export function withExample(command: Command, examples: string[]): Command {
  return command.addHelpText(
    'after',
    `\nExample${examples.length > 1 ? 's' : ''}:\n${examples.map((e) => `  $ ${e}`).join('\n')}\n`,
  );
}
