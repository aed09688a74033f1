/**
 * The `slipway` command of a Slipway installation: the command line of @slipway/cli (the API's
 * commands), with what only the service has added to it: its operator commands (`server`, `backup`,
 * `restore`, `remove-data`), which run the service's own code, and its app config rules, which `slipway deploy` checks
 * a folder with before it creates or uploads anything (the same module the data plane builds with, so
 * the same rules and words).
 */
import { buildProgram as buildClientProgram, type AppConfigCheck, type CliRuntime } from '@slipway/cli';
import type { Command } from 'commander';
import { AppConfigError, readAppConfig } from '../dataplane/app-config-file.ts';
import { backupCommand, removeDataCommand, restoreCommand } from './backup-commands.ts';
import { serverCommand } from './server-command.ts';

const checkAppConfig: AppConfigCheck = async (folder, configPath, overrides) => {
  try {
    await readAppConfig(folder, configPath, overrides);
    return null;
  } catch (error) {
    if (error instanceof AppConfigError) return error.message;
    throw error;
  }
};

export function buildProgram(runtime: CliRuntime): Command {
  return buildClientProgram(runtime, {
    commands: [serverCommand(runtime), backupCommand(runtime), restoreCommand(runtime), removeDataCommand(runtime)],
    checkAppConfig,
  });
}
