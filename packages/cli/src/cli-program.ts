/**
 * The `slipway` command tree (docs/cli.md). Global options (`--json`, `--url`, `--tenant`) may be
 * given anywhere on the line; every command has `--help` with an example.
 */
import { Command } from 'commander';
import type { CliRuntime } from './cli-context.ts';
import { EXIT } from './cli-errors.ts';
import { actionRunner, withExample } from './command-help.ts';
import { deployCommand, type AppConfigCheck } from './deploy-command.ts';
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
import { protocolCredentialsCommand } from './protocol-credential-commands.ts';
import { endpointsCommand } from './endpoint-commands.ts';
import { scaleCommand } from './scale-command.ts';

/** What the host of the command line adds to it: the service adds its operator commands and app config rules. */
export interface ProgramOptions {
  /** Added after the client commands (the service's `server`, `backup`, `restore`). */
  commands?: Command[];
  /** Checks a folder's app config before `slipway deploy` creates anything. */
  checkAppConfig?: AppConfigCheck;
}

export function buildProgram(runtime: CliRuntime, options: ProgramOptions = {}): Command {
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
    deployCommand(run, options.checkAppConfig),
    ls,
    status,
    deploymentsCommand(run),
    revisionsCommand(run),
    rollbackCommand(run),
    interruptCommand(run),
    scaleCommand(run),
    endpointsCommand(run),
    logsCommand(run),
    listenersCommand(run),
    keysCommand(run),
    protocolCredentialsCommand(run),
    integrationsCommand(run),
    loginCommand(run, runtime.version),
    logoutCommand(run),
    ...(options.commands ?? []),
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
