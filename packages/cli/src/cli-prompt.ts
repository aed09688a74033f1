/** Questions at the terminal (`login`, `deployments rm`): only when stdin is a terminal, never in scripts. */
import readline from 'node:readline/promises';
import { Writable } from 'node:stream';
import type { CliContext } from './cli-context.ts';

export const canPrompt = (): boolean => process.stdin.isTTY === true;

/** Asks on stderr; with `hidden` the answer is not echoed (an API key). */
export async function ask(question: string, options: { hidden?: boolean } = {}): Promise<string> {
  let muted = false;
  // A stream that drops what readline echoes while the answer is being typed.
  const echo = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (!muted) process.stderr.write(chunk);
      callback();
    },
  });
  const rl = readline.createInterface({ input: process.stdin, output: echo, terminal: true });
  try {
    const answer = rl.question(question);
    muted = options.hidden === true;
    return (await answer).trim();
  } finally {
    muted = false;
    if (options.hidden) process.stderr.write('\n');
    rl.close();
  }
}

/** Yes or no at the terminal; false when there is no terminal to ask at. */
export async function confirm(_ctx: CliContext, question: string): Promise<boolean> {
  if (!canPrompt()) return false;
  const answer = await ask(`${question} [y/N] `);
  return /^y(es)?$/i.test(answer);
}
