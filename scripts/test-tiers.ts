/**
 * The suite's tiers, by what a test file needs (`npm test -- --tier NAME`; .ci/run runs each as a step
 * of its own):
 *
 * - `no-database`: no database (some start HAProxy or a sandbox of their own all the same);
 * - `database`: a PostgreSQL database (test/support/harness.ts clones the run's template), no apps;
 * - `apps`: runs what users run or the service as a whole: the local data plane (sandboxes, builds,
 *   the app edge), the service's own process, the listener agent's process, a browser.
 *
 * `npm test` with no tier runs all of them: the README's test command. Which PostgreSQL a run uses
 * matters most to the `database` tier, whose SQL .ci/run runs against both the embedded server and the
 * operator's (DATABASE_URL, an older major version); `no-database` needs none, and `apps` (most of the
 * suite's time) runs against the embedded one, but for the few files .ci/run names for the other.
 *
 * A file's tier is read from what it and the test/ modules it imports call (MARKERS): every file is in
 * exactly one tier, so `npm test` runs each once, and a file is never left out of every pass. The
 * harness that defines the database's starters (DEFINITIONS) is not read for them: a file that imports
 * only its port or its admin key (a database that cannot be reached, a bare Fastify) needs no database,
 * and was run again against DATABASE_URL for nothing. Whatever of the harness needs a database takes the
 * test app or database that a call of one of the starters gave.
 */
import fs from 'node:fs/promises';
import path from 'node:path';

export const TIERS = ['no-database', 'database', 'apps'] as const;
export type Tier = (typeof TIERS)[number];

/** What marks a file as needing a tier, checked from the most to the least it needs. */
const MARKERS: Record<Exclude<Tier, 'no-database'>, RegExp> = {
  // A call (not the definition in test/support/harness.ts), or a helper module that exists to start them.
  // The LangGraph server of a deployment, started as the data plane starts it: '.slipway/langgraph-server.mjs'.
  apps: /(?<!function )\b(startDataPlane|startTestService|spawnService|startService|chromium\.launch)\s*\(|(?:from|import\()\s*['"][^'"]*\/(data-plane-harness|service-harness|e2e-world)\.ts['"]|from 'playwright-core'|['"][^'"]*langgraph-server\.mjs['"]/,
  database: /\b(createTestDatabase|createTestApp|SLIPWAY_TEST_TEMPLATE|SLIPWAY_TEST_ADMIN_URL)\b/,
};

const TEST_DIR = path.resolve('test');

/** Where the markers are defined, not called: its own text is not read (the modules it imports are). */
const DEFINITIONS = path.resolve('test/support/harness.ts');

/**
 * The file's text and that of every module under test/ it imports, however deep (src/ is not read; nor is
 * test/support/harness.ts's own text, DEFINITIONS).
 */
export async function textWithHelpers(file: string, seen = new Set<string>()): Promise<string> {
  const absolute = path.resolve(file);
  if (seen.has(absolute)) return '';
  seen.add(absolute);
  const text = await fs.readFile(absolute, 'utf8');
  const helpers = [...text.matchAll(/(?:from|import\()\s*['"](\.{1,2}\/[^'"]+)['"]/g)]
    .map((m) => path.resolve(path.dirname(absolute), m[1]!))
    .filter((target) => target.startsWith(TEST_DIR + path.sep));
  const theirs = await Promise.all(helpers.map((h) => textWithHelpers(h, seen).catch(() => '')));
  return [absolute === DEFINITIONS ? '' : text, ...theirs].join('\n');
}

export async function tierOf(file: string): Promise<Tier> {
  const text = await textWithHelpers(file);
  if (MARKERS.apps.test(text)) return 'apps';
  if (MARKERS.database.test(text)) return 'database';
  return 'no-database';
}

/** The paths a list of test files names (`npm test -- --except`): a path a line, `#` to the line's end a comment. */
export function listedPaths(text: string): string[] {
  return text
    .split('\n')
    .map((line) => line.replace(/#.*/, '').trim())
    .filter((line) => line !== '')
    .map((line) => path.normalize(line));
}
