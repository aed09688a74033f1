/**
 * Runs `slipway` as a user does, as a child process with its own home and config directory, and only
 * the environment given (the test runner's own variables do not leak into it): the CLI's source
 * (src/cli/main.ts, which bin/slipway.mjs runs) as this run bundled it, or with tsx
 * (scripts/test-bundles.ts). bin/slipway.mjs itself is cli-colour's and the install test's.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { entryCommand } from '../../scripts/test-bundles.ts';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface CliUser {
  home: string;
  /** Where `slipway login` writes: $XDG_CONFIG_HOME/slipway/config.json. */
  configFile: string;
  run(args: string[], options?: { env?: Record<string, string>; cwd?: string; input?: string }): Promise<CliResult>;
  remove(): Promise<void>;
}

export async function cliUser(env: Record<string, string> = {}): Promise<CliUser> {
  const home = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-cli-home-'));
  const configHome = path.join(home, '.config');
  return {
    home,
    configFile: path.join(configHome, 'slipway', 'config.json'),
    run(args, options = {}) {
      return new Promise((resolve) => {
        const child = execFile(
          process.execPath,
          [...entryCommand('src/cli/main.ts'), ...args],
          {
            cwd: options.cwd ?? ROOT,
            env: { PATH: process.env.PATH ?? '', HOME: home, XDG_CONFIG_HOME: configHome, ...env, ...options.env },
            maxBuffer: 32 * 1024 * 1024,
          },
          (error, stdout, stderr) =>
            resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }),
        );
        child.stdin?.end(options.input ?? '');
      });
    },
    remove: () => fs.rm(home, { recursive: true, force: true }),
  };
}

/** A port nothing listens on (taken, then released). */
export { freePort } from '../../src/db/embedded-postgres.ts';
