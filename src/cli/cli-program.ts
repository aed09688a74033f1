/**
 * The `slipway` command tree (docs/cli.md). Global options (`--json`, `--url`, `--tenant`) may be
 * given anywhere on the line; every command has `--help` with an example.
 */
import { Command } from 'commander';
import type { CliRuntime } from './cli-context.ts';
import { backupCommand, restoreCommand } from './backup-commands.ts';
import { EXIT } from './cli-errors.ts';
import { actionRunner, withExample } from './command-help.ts';
import { deployCommand } from './deploy-command.ts';
import {
  deploymentsCommand,
  interruptCommand,
  listDeploymentsCommand,
  logsCommand,
  revisionsCommand,
  rollbackCommand,
  showDeploymentCommand,
} from './deployment-commands.ts';
import { integrationsCommand } from './integration-commands.ts';
import { keysCommand } from './key-commands.ts';
import { listenersCommand } from './listener-commands.ts';
import { loginCommand, logoutCommand } from './login-command.ts';
import { Output } from './cli-output.ts';
import { scaleCommand } from './scale-command.ts';
import { serverCommand } from './server-command.ts';

export function buildProgram(runtime: CliRuntime): Command {
  const run = actionRunner(runtime);
  // Commander's own messages (help, usage errors) go through the same streams and colour rules.
  const output = new Output(runtime.streams, { json: false, noColor: runtime.environment.noColor });
  const program = new Command('slipway')
    .description('Deploy agent apps to a Slipway service and manage them')
    .version(runtime.version, '-V, --version')
    .option('--json', 'print results as JSON on stdout (progress and messages stay on stderr)')
    .option(
      '--url <url>',
      'the service address (default: SLIPWAY_URL, else the saved login, else http://127.0.0.1:8124)',
    )
    .option(
      '--tenant <workspace_id>',
      'the workspace an organization key acts on (X-Tenant-Id; default SLIPWAY_TENANT_ID)',
    )
    .addHelpText(
      'after',
      `\nExit codes: ${EXIT.ok} ok, ${EXIT.failed} failed, ${EXIT.usage} bad usage or input, ${EXIT.auth} not logged in or key refused, ${EXIT.notFound} not found, ${EXIT.unavailable} service unreachable or failing, ${EXIT.interrupted} interrupted (docs/cli.md).`,
    )
    .showSuggestionAfterError()
    .configureOutput({
      writeOut: (text) => output.write('stdout', text),
      writeErr: (text) => output.write('stderr', text),
      outputError: (text, write) => write(text.replace(/^error:/, output.err.red('error:'))),
    })
    .exitOverride();
  withExample(program, [
    'slipway login',
    'slipway deploy ./my-agent --name my-agent',
    'slipway logs my-agent --follow',
  ]);

  // Where users of other PaaS command lines look first: `slipway ls`, `slipway status <deployment>`.
  const ls = listDeploymentsCommand(run, 'ls', 'ls', ['list']);
  ls.description(`${ls.description()} (same as deployments ls)`);
  const status = showDeploymentCommand(run, 'status', 'status', ['info']);
  status.description(`${status.description()} (same as deployments get)`);
  for (const command of [
    deployCommand(run),
    ls,
    status,
    deploymentsCommand(run),
    revisionsCommand(run),
    rollbackCommand(run),
    interruptCommand(run),
    scaleCommand(run),
    logsCommand(run),
    listenersCommand(run),
    keysCommand(run),
    integrationsCommand(run),
    loginCommand(run, runtime.version),
    logoutCommand(run),
    serverCommand(runtime),
    backupCommand(runtime),
    restoreCommand(runtime),
  ]) {
    program.addCommand(command);
  }
  inheritSettings(program);
  return program;
}

/** addCommand (unlike .command()) does not pass output and exit settings down: copy them to the whole tree. */
function inheritSettings(parent: Command): void {
  for (const child of parent.commands) {
    child.copyInheritedSettings(parent);
    inheritSettings(child);
  }
}
