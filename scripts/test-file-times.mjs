/**
 * A reporter for Node's test runner (`npm test -- --times FILE`): how long each test file took (its
 * process from start to exit, as the runner timed it) and whether it passed, one JSON line per file in
 * FILE as each file ends (scripts/run-tests.ts sorts them, slowest first, when the run ends: the runner's
 * --test-force-exit ends the run before a reporter that waits for the end could write). A file that
 * grew slow shows up by name.
 *
 * Files are read off the runner's own per-file test (its name is the file's path), not off the tests in
 * it: a test declared through test/support/limited-test.ts reports that module as its location.
 *
 * JavaScript, not TypeScript: the runner loads reporters before `--import tsx` applies.
 */

/** @param {AsyncIterable<import('node:test/reporters').TestEvent>} source */
export default async function* fileTimes(source) {
  for await (const event of source) {
    if (event.type !== 'test:complete') continue;
    const { data } = event;
    if (data.nesting !== 0 || !data.file || data.name !== data.file) continue;
    const entry = {
      file: data.file,
      seconds: Math.round(data.details.duration_ms / 100) / 10,
      passed: data.details.passed,
    };
    yield `${JSON.stringify(entry)}\n`;
  }
}
