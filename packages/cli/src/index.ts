/**
 * The `slipway` command line as a package (docs/cli.md): the command tree over @slipway/sdk, and what
 * a host needs to add commands to it (the service adds `server`, `backup` and `restore`).
 */
export { runCli, type CliOptions } from './cli-main.ts';
export { buildProgram, type ProgramOptions } from './cli-program.ts';
export type { AppConfigCheck } from './deploy-command.ts';
export { readEnvironment, type CliEnvironment } from './cli-config.ts';
export type { CliContext, CliRuntime } from './cli-context.ts';
export { CliError, EXIT } from './cli-errors.ts';
export { withExample } from './command-help.ts';
