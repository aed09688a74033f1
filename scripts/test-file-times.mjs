/**
 * A reporter for Node's test runner (`npm test -- --times FILE`): how long each test file's top-level
 * tests took together, one JSON line per file in FILE when the run ends, slowest first. CI's steps are
 * sized from it (.ci/run), and a file that grew slow shows up by name.
 *
 * JavaScript, not TypeScript: the runner loads reporters before `--import tsx` applies.
 */

/** @param {AsyncIterable<import('node:test/reporters').TestEvent>} source */
export default async function* fileTimes(source) {
  /** @type {Map<string, { ms: number; tests: number; failed: number }>} */
  const perFile = new Map();
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { data } = event;
    if (data.nesting !== 0 || !data.file) continue;
    const entry = perFile.get(data.file) ?? { ms: 0, tests: 0, failed: 0 };
    entry.ms += data.details.duration_ms;
    entry.tests += 1;
    if (event.type === 'test:fail') entry.failed += 1;
    perFile.set(data.file, entry);
  }
  const rows = [...perFile].sort((a, b) => b[1].ms - a[1].ms);
  for (const [file, { ms, tests, failed }] of rows)
    yield `${JSON.stringify({ file, seconds: Math.round(ms / 100) / 10, tests, failed })}\n`;
}
