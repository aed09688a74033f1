/**
 * `node scripts/slowest-files.mjs FILE [N]`: the N (15) slowest test files of a times file written by
 * `npm test -- --times FILE` (scripts/run-tests.ts), one line each: seconds, tier, file, and FAILED for one
 * that failed; then every other file that failed, and each test that failed with the first line of why.
 * .ci/run prints it for each of its test steps, so every CI run ends saying where its time went and what
 * failed.
 *
 * JavaScript, not TypeScript: .ci/as-ordinary-user's times are read by root after that pass, with plain node.
 */
import fs from 'node:fs';

const [file, count = '15'] = process.argv.slice(2);
if (!file) throw new Error('usage: node scripts/slowest-files.mjs FILE [N]');
const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
const entries = text
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => JSON.parse(line));
const files = entries.filter((entry) => !('failed' in entry));
const failedTests = entries.filter((entry) => 'failed' in entry);
files.sort((a, b) => b.seconds - a.seconds);
/** @param {{ file: string; tier?: string; seconds: number; passed: boolean }} entry */
const line = ({ file: name, tier, seconds, passed }) =>
  `${seconds.toFixed(0).padStart(6)} s  ${(tier ?? '?').padEnd(11)}  ${name}${passed ? '' : '  FAILED'}\n`;
if (files.length === 0) process.stdout.write('   (no times: the step ran no test file)\n');
const shown = files.slice(0, Number(count));
for (const entry of shown) process.stdout.write(line(entry));
// Every failed file, and the failed tests, however slow: the end of CI's log says what to look at.
for (const entry of files.slice(Number(count)).filter((e) => !e.passed)) process.stdout.write(line(entry));
for (const { failed, at, reason } of failedTests)
  process.stdout.write(
    `   failed: ${failed}${at && !at.startsWith('test/support/') ? ` (${at})` : ''}\n     ${reason}\n`,
  );
