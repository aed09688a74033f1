/**
 * Every command of `slipway` answers `--help` with a description and at least one example, and the
 * top-level help lists the exit codes. Checked on the command tree itself, so a new command without
 * an example fails here.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import type { Command } from 'commander';
import { readEnvironment } from '@slipway/cli';
import { buildProgram } from '../../src/cli/cli-program.ts';

function program() {
  let text = '';
  const stream = new PassThrough() as PassThrough & NodeJS.WriteStream;
  stream.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const built = buildProgram({
    environment: readEnvironment({ NO_COLOR: '1' }),
    streams: { stdout: stream, stderr: stream },
    version: '0.0.0',
    lastUrl: null,
    handOverSignals: () => undefined,
  });
  return { built, read: () => text };
}

function commandPaths(command: Command, prefix: string[] = []): string[][] {
  return command.commands.flatMap((child) => [
    [...prefix, child.name()],
    ...commandPaths(child, [...prefix, child.name()]),
  ]);
}

test('--help of every command has a description and an example', async () => {
  const paths = commandPaths(program().built);
  assert.ok(paths.length >= 25, `${paths.length} commands`);
  for (const path of [[], ...paths]) {
    const { built, read } = program();
    await assert.rejects(built.parseAsync(['node', 'slipway', ...path, '--help']), { code: 'commander.helpDisplayed' });
    const help = read();
    assert.match(help, /^Usage: slipway/, path.join(' '));
    assert.match(help, /\nExamples?:\n {2}\$ slipway /, `slipway ${path.join(' ')} --help has no example`);
  }
  const { built, read } = program();
  await assert.rejects(built.parseAsync(['node', 'slipway', '--help']));
  assert.match(
    read(),
    /Exit codes: 0 ok, 1 failed, 2 bad usage or input, 3 not logged in or key refused, 4 not found, 5 service unreachable/,
  );
});

test('the names users of other PaaS command lines try first lead to the same commands, and the help lists them', async () => {
  const usage = async (path: string[]) => {
    const { built, read } = program();
    await assert.rejects(built.parseAsync(['node', 'slipway', ...path, '--help']), { code: 'commander.helpDisplayed' });
    return read().split('\n')[0] ?? '';
  };
  // `heroku apps`, `fly status`, `railway redeploy`, `heroku releases`, `fly apps destroy`, ...
  for (const [alias, usageLine] of [
    [['ls'], /^Usage: slipway ls\|list /],
    [['list'], /^Usage: slipway ls\|list /],
    [['status'], /^Usage: slipway status\|info .*<deployment>/],
    [['info'], /^Usage: slipway status\|info /],
    [['apps', 'ls'], /^Usage: slipway deployments ls\|list /],
    [['apps', 'info'], /^Usage: slipway deployments get\|show /],
    [['deployments', 'status'], /^Usage: slipway deployments get\|show /],
    [['deployments', 'destroy'], /^Usage: slipway deployments rm\|delete /],
    [['releases', 'ls'], /^Usage: slipway revisions ls\|list /],
    [['redeploy'], /^Usage: slipway rollback\|redeploy /],
  ] as const) {
    assert.match(await usage([...alias]), usageLine, alias.join(' '));
  }
  const { built, read } = program();
  await assert.rejects(built.parseAsync(['node', 'slipway', '--help']));
  assert.match(read(), /\n {2}ls\|list .*same as deployments ls/);
  assert.match(read(), /\n {2}status\|info .*same as deployments get/);
});
