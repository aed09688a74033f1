/**
 * `node scripts/slowest-files.mjs FILE [N]`: the N (15) slowest test files of a times file written by
 * `npm test -- --times FILE` (scripts/run-tests.ts), one line each: seconds, tier, file, and FAILED for one
 * that failed. .ci/run prints it for each of its test steps, so every CI run says where its time went.
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
entries.sort((a, b) => b.seconds - a.seconds);
if (entries.length === 0) process.stdout.write('   (no times: the step ran no test file)\n');
for (const { file: name, tier, seconds, passed } of entries.slice(0, Number(count)))
  process.stdout.write(
    `${seconds.toFixed(0).padStart(6)} s  ${(tier ?? '?').padEnd(11)}  ${name}${passed ? '' : '  FAILED'}\n`,
  );
