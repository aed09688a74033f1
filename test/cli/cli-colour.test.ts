/**
 * Colours as a user sees them: at a terminal (a pseudo-terminal made by util-linux `script`) the
 * `error:` label is red; with NO_COLOR set, or through a pipe, there is no escape code at all.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT, cliUser, type CliUser } from './cli-runner.ts';

const RED_ERROR = '\u001b[31merror:\u001b[39m';
const ESCAPE = '\u001b[';

let home: string;
let user: CliUser;
before(async () => {
  home = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-cli-tty-'));
  user = await cliUser();
});
after(async () => {
  await fs.rm(home, { recursive: true, force: true });
  await user.remove();
});

/** Runs `slipway` under a pseudo-terminal; stdout and stderr both reach it (and come back here merged). */
function atTerminal(args: string[], env: Record<string, string> = {}): Promise<string> {
  const line = [process.execPath, path.join(ROOT, 'bin/slipway.mjs'), ...args].map((a) => `'${a}'`).join(' ');
  return new Promise<string>((resolve, reject) =>
    execFile(
      'script',
      ['-qec', line, '/dev/null'],
      {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'), ...env },
      },
      (error, stdout) => {
        // `script -e` exits with the command's code: 3, not logged in, is the expected one here.
        if (error && error.code !== 3) reject(new Error(`script failed: ${error.message}`));
        else resolve(stdout);
      },
    ),
  );
}

test('colours at a terminal, none with NO_COLOR or TERM=dumb', async () => {
  const coloured = await atTerminal(['deployments', 'ls'], { TERM: 'xterm-256color' });
  assert.ok(coloured.includes(RED_ERROR), `a red "error:" at a terminal, got ${JSON.stringify(coloured)}`);
  assert.match(coloured, /not logged in/);

  const plainEnvs: Record<string, string>[] = [{ TERM: 'xterm-256color', NO_COLOR: '1' }, { TERM: 'dumb' }];
  for (const env of plainEnvs) {
    const plain = await atTerminal(['deployments', 'ls'], env);
    assert.match(plain, /error: not logged in/, JSON.stringify(plain));
    assert.ok(!plain.includes(ESCAPE), `no escape code with ${JSON.stringify(env)}, got ${JSON.stringify(plain)}`);
  }
});

test('no colours through a pipe', async () => {
  const piped = await user.run(['deployments', 'ls'], { env: { TERM: 'xterm-256color' } });
  assert.equal(piped.code, 3);
  assert.match(piped.stderr, /^error: not logged in/);
  assert.ok(!piped.stderr.includes(ESCAPE));
});
