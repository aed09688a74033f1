/**
 * A reporter for Node's test runner (`npm test -- --times FILE`): how long each test file took (its
 * process from start to exit, as the runner timed it) and whether it passed, one JSON line per file in
 * FILE when the run ends, slowest first. A file that grew slow shows up by name.
 *
 * Files are read off the runner's own per-file test (its name is the file's path), not off the tests in
 * it: a test declared through test/support/limited-test.ts reports that module as its location.
 *
 * JavaScript, not TypeScript: the runner loads reporters before `--import tsx` applies.
 */

/** @param {AsyncIterable<import('node:test/reporters').TestEvent>} source */
export default async function* fileTimes(source) {
  /** @type {Map<string, { seconds: number; passed: boolean }>} */
  const perFile = new Map();
  for await (const event of source) {
    if (event.type !== 'test:complete') continue;
    const { data } = event;
    if (data.nesting !== 0 || !data.file || data.name !== data.file) continue;
    perFile.set(data.file, {
      seconds: Math.round(data.details.duration_ms / 100) / 10,
      passed: data.details.passed,
    });
  }
  const rows = [...perFile].sort((a, b) => b[1].seconds - a[1].seconds);
  for (const [file, entry] of rows) yield `${JSON.stringify({ file, ...entry })}\n`;
}
