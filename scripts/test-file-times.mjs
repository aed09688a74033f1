/**
 * A reporter for Node's test runner (`npm test -- --times FILE`): how long each test file took (its
 * process from start to exit, as the runner timed it) and whether it passed, one JSON line per file in
 * FILE as each file ends, and a line for each test that failed, with the first line of why (scripts/run-tests.ts
 * sorts the files, slowest first, when the run ends: the runner's --test-force-exit ends the run before a
 * reporter that waits for the end could write). A file that grew slow, or a test that failed, shows up
 * by name at the end of CI's log (scripts/slowest-files.mjs), however much of the log above is cut off.
 *
 * Files are read off the runner's own per-file test (its name is the file's path), not off the tests in
 * it: a test declared through test/support/limited-test.ts reports that module as its location. A failed
 * test's line says where the runner placed it (`at`), which for such a test is that module: its name
 * says which it is. (Node 20 reports a file's tests and the file's own end apart, interleaved with other
 * files' when several run at once, so a test cannot be put with its file here.)
 *
 * JavaScript, not TypeScript: the runner loads reporters before `--import tsx` applies.
 */

/** How many failed tests a run keeps, and how long a reason may be. */
const MAX_FAILURES = 10;
const MAX_REASON = 300;

/** @param {unknown} error */
function reasonOf(error) {
  /** @type {any} */
  let e = error;
  // The runner wraps what a test threw (ERR_TEST_FAILURE, with the thrown value as its cause).
  while (e && typeof e === 'object' && e.code === 'ERR_TEST_FAILURE' && e.cause) e = e.cause;
  const text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  const line = text.split('\n').find((l) => l.trim() !== '') ?? text;
  return line.length > MAX_REASON ? `${line.slice(0, MAX_REASON)}…` : line;
}

/** @param {AsyncIterable<import('node:test/reporters').TestEvent>} source */
export default async function* fileTimes(source) {
  let failures = 0;
  for await (const event of source) {
    const { data } = event;
    if (event.type === 'test:fail') {
      // A file's own failure is its line below; a suite fails when a test in it does, and the test is
      // the news, not each suite around it; a todo test's failure fails nothing.
      if (data.name === data.file || data.details.type === 'suite' || data.todo || failures >= MAX_FAILURES) continue;
      failures += 1;
      yield `${JSON.stringify({ failed: data.name, at: data.file, reason: reasonOf(data.details.error) })}\n`;
      continue;
    }
    if (event.type !== 'test:complete') continue;
    if (data.nesting !== 0 || !data.file || data.name !== data.file) continue;
    const entry = {
      file: data.file,
      seconds: Math.round(data.details.duration_ms / 100) / 10,
      passed: data.details.passed,
    };
    yield `${JSON.stringify(entry)}\n`;
  }
}
