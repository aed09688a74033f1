/**
 * The test start group of `npm run bench` (`--only teststart`; docs/performance.md, "A test file's
 * start"): the CPU time a fresh process spends loading what a test file loads first (the harness, and
 * through it the whole service: bench/test-start-fixture.ts), in the three ways a test file can run:
 *
 * - `packages bundled`: `npm test`'s bundle, the npm packages in it but for those left to Node
 *   (scripts/test-bundles.ts, NODE_LOADS);
 * - `packages left to Node`: a bundle of the repository's code only, every package loaded by Node
 *   module by module (how the bundles were made before);
 * - `tsx`: the TypeScript through tsx's loader (`npm test -- --no-bundle`).
 *
 * The bundles are made once, before the samples (their making is the run's, not each file's). Each
 * sample is a fresh process started as `npm test` starts a file (`--enable-source-maps` for a bundle);
 * the modes alternate, the first of a round rotating; the table gives each mode's median and the
 * median of the rounds' ratios to the bundle of packages.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { bundleDir, bundleTests } from '../scripts/test-bundles.ts';
import { median } from './median.ts';

export const isTestStartKey = (key: string) => key === 'teststart';

type Mode = 'packages bundled' | 'packages left to Node' | 'tsx';
const MODES: readonly Mode[] = ['packages bundled', 'packages left to Node', 'tsx'];

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'test-start-fixture.ts');

export interface TestStartResults {
  rounds: number;
  /** CPU seconds of each sample, by mode. */
  samples: Record<Mode, number[]>;
  /** Each round's CPU of the other modes over the bundle of packages. */
  ratios: Record<Mode, number[]>;
}

export async function runTestStartBench(options: {
  rounds: number;
  say: (line: string) => void;
}): Promise<TestStartResults> {
  const run = promisify(execFile);
  const fixture = path.relative(process.cwd(), FIXTURE);
  const dirs = { bundled: await bundleDir(), node: await bundleDir() };
  try {
    const [bundled] = await bundleTests([fixture], dirs.bundled);
    const [unbundled] = await bundleTests([fixture], dirs.node, { packages: 'node' });
    const command: Record<Mode, string[]> = {
      'packages bundled': ['--enable-source-maps', bundled!],
      'packages left to Node': ['--enable-source-maps', unbundled!],
      tsx: ['--import', 'tsx', FIXTURE],
    };
    const samples: Record<Mode, number[]> = { 'packages bundled': [], 'packages left to Node': [], tsx: [] };
    const ratios: Record<Mode, number[]> = { 'packages bundled': [], 'packages left to Node': [], tsx: [] };
    for (let round = 0; round < options.rounds; round += 1) {
      const shift = round % MODES.length;
      const got: Partial<Record<Mode, number>> = {};
      for (const mode of [...MODES.slice(shift), ...MODES.slice(0, shift)]) {
        const { stdout } = await run(process.execPath, command[mode]);
        got[mode] = Number(JSON.parse(stdout.trim().split('\n').at(-1)!));
        samples[mode].push(got[mode]);
      }
      for (const mode of MODES) ratios[mode].push(got[mode]! / got['packages bundled']!);
      options.say(
        `teststart: round ${round + 1}: ${MODES.map((mode) => `${mode} ${got[mode]!.toFixed(2)} s`).join(', ')}`,
      );
    }
    return { rounds: options.rounds, samples, ratios };
  } finally {
    await Promise.all(Object.values(dirs).map((dir) => fs.rm(dir, { recursive: true, force: true })));
  }
}

export function testStartTerminalReport(results: TestStartResults): string {
  return [
    "a test file's start: CPU seconds to load the harness, median of the rounds",
    ...MODES.map(
      (mode) =>
        `  ${mode.padEnd(22)} ${median(results.samples[mode]).toFixed(3)}  ratio to packages bundled ${median(results.ratios[mode]).toFixed(2)}`,
    ),
  ].join('\n');
}

export function testStartMarkdownReport(results: TestStartResults, run: { date: string; machine: string }): string {
  return [
    `Run ${run.date} on ${run.machine}: ${results.rounds} rounds, a fresh process per sample.`,
    '',
    '| a test file runs as | CPU s to load the harness | ratio to packages bundled |',
    '|---|---|---|',
    ...MODES.map(
      (mode) =>
        `| ${mode === 'packages bundled' ? 'a bundle, packages bundled (`npm test`)' : mode === 'tsx' ? 'TypeScript through tsx (`--no-bundle`)' : 'a bundle, packages left to Node'} | ${median(results.samples[mode]).toFixed(3)} | ${median(results.ratios[mode]).toFixed(2)} |`,
    ),
  ].join('\n');
}
