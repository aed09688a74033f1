/**
 * The suite's rules about time (docs in the README, "Development"; test/support/wait.ts): a test waits for
 * a condition with `eventually` (a deadline in seconds, the condition named in its failure), lets time pass
 * only through `pause` (short, with its reason) or a clock it moves (test/support/clock.ts), never measures
 * how long something took, and a file that can wait gives each test the per-test limit. Time passing is
 * never faked by dating rows back either: a store or sweep that judges an age takes a clock
 * (src/store/sql-now.ts). These checks read test/ as text, so a new sleep, polling loop of its own,
 * stopwatch, race against a timer or row dated back fails here by file and line.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { MAX_PAUSE_MS, MAX_TEST_SECONDS, pause } from './support/wait.ts';

/** What the rules forbid outside test/support/wait.ts, each with what to use instead. */
const FORBIDDEN: { pattern: RegExp; instead: string }[] = [
  {
    pattern: /new Promise(?:<\w+>)?\(\s*\(?\w*\)?\s*=>\s*setTimeout\(\s*\w+\s*,/g,
    instead: 'a sleep: eventually(what, check), a clock, or pause(ms, why)',
  },
  { pattern: /from 'node:timers\/promises'/g, instead: 'a sleep: eventually(what, check), a clock, or pause(ms, why)' },
  { pattern: /while\s*\([^)]*Date\.now\(\)/g, instead: 'a polling loop of its own: eventually(what, check)' },
  { pattern: /Date\.now\(\)\s*<\s*\w*(?:until|deadline)/gi, instead: 'a deadline of its own: eventually(what, check)' },
  { pattern: /performance\.now\(\)/g, instead: 'a stopwatch: assert what happened, in which order, not how long' },
];

/**
 * The files that had such a line when the rules came in (short pacing of load generators and clean-ups,
 * under a second each), with how many: the count may only go down, and this list with it. A new file, or
 * one more in a listed file, fails.
 */
const KNOWN: Record<string, number> = {
  'test/attack/app-api-otlp-2.test.ts': 1,
  'test/attack/app-edge.test.ts': 1,
  'test/attack/app-metrics-2.test.ts': 1,
  'test/attack/database-storage.test.ts': 1,
  'test/attack/disk-images.test.ts': 1,
  'test/dataplane/archive.test.ts': 1,
  // The attacker apps' own source (it runs in the sandbox, not in the test).
  'test/dataplane/containment-apps.ts': 2,
  'test/dataplane/containment-resources.test.ts': 1,
  'test/dataplane/data-plane-harness.ts': 1,
  'test/dataplane/deploy-lifecycle.test.ts': 1,
  'test/dataplane/endpoints.test.ts': 1,
  'test/dataplane/log-writer.test.ts': 1,
  'test/dataplane/postgres-startup-gate.test.ts': 1,
  'test/dataplane/process-end.test.ts': 1,
  'test/dataplane/resource-limits.test.ts': 1,
  'test/dataplane/sandbox-probe.test.ts': 1,
  'test/http/closing-answer.test.ts': 1,
  'test/http/stream-limits.test.ts': 1,
  'test/oauth/oauth-client.test.ts': 1,
  'test/oauth/oauth-test-app.ts': 1,
  'test/routes/revision-logs.test.ts': 1,
  'test/store/app-slugs.test.ts': 1,
};

/**
 * What makes time seem to pass, or decides an outcome by how long it took, without a sleep: each with what
 * to use instead.
 */
const TIME_FAKED: { pattern: RegExp; instead: string }[] = [
  {
    pattern: /now\(\)\s*-\s*(?:interval\b|make_interval\()/gi,
    instead: 'a row dated back by SQL: give the store or sweep a clock and move it (support/clock.ts)',
  },
  {
    pattern: /\w+_(?:at|until)\s*:\s*new Date\(\s*Date\.now\(\)\s*-/g,
    instead: 'a row dated back: give the store or sweep a clock and move it (support/clock.ts)',
  },
  {
    pattern: /Date\.now\(\)\s*-\s*(?:start|began|begin|before|t0)\w*/gi,
    instead: 'a stopwatch: assert what happened, in which order, not how long',
  },
  {
    pattern: /Promise\.race\(\s*\[[^\]]*?\bsetTimeout\(/g,
    instead: 'a race against a timer: wait for the outcome (eventually), or for the event that decides it',
  },
  {
    pattern: /\b(?:sleep|delay)\(\s*(?:[1-9]\d{3,}|[1-9]\d?_\d{3})\s*[,)]/g,
    instead: 'a sleep of a second or more: eventually(what, check), a clock, or pause(ms, why)',
  },
];

/**
 * The files that had such a line when the rule came in, with how many and why each is left: the count may
 * only go down, and this list with it.
 */
const KNOWN_TIME_FAKED: Record<string, number> = {
  // One revision must be older than the others beside it; a clock given to the deadline sweep ages them all.
  'test/listener-protocol/reports.test.ts': 1,
  // The long poll's timeout and its end at close are timers of the service's own, measured here.
  'test/oauth/oauth-flow-failures.test.ts': 3,
  // The CPU usage rate over a measuring window: the window's length is an input, not an assertion.
  'test/dataplane/resource-limits.test.ts': 1,
  // A refused long poll answers at once, a held one not within the race's seconds.
  'test/attack/stream-budgets.test.ts': 1,
  // A follower is woken by the change feed before the safety poll would wake it; closing the server ends
  // a follow stream rather than hanging: both told apart from the alternative by a timer.
  'test/routes/revision-logs.test.ts': 3,
};

const THIS_FILE = 'test/test-rules.test.ts';

async function testSources(): Promise<{ file: string; text: string }[]> {
  const entries = await fs.readdir('test', { withFileTypes: true, recursive: true });
  const files = entries
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => path.relative(process.cwd(), path.join(e.parentPath, e.name)))
    .filter((file) => file !== 'test/support/wait.ts' && file !== THIS_FILE)
    .sort();
  return Promise.all(files.map(async (file) => ({ file, text: await fs.readFile(file, 'utf8') })));
}

function lineOf(text: string, index: number): number {
  return text.slice(0, index).split('\n').length;
}

/**
 * Fails on a file with more matches of `patterns` than `known` allows (each match named by file and line),
 * and on a file in `known` with fewer than it says, so that the list goes down with the code.
 */
async function assertOnlyKnown(
  patterns: { pattern: RegExp; instead: string }[],
  known: Record<string, number>,
  knownName: string,
  what: string,
): Promise<void> {
  const found = new Map<string, string[]>();
  for (const { file, text } of await testSources()) {
    for (const { pattern, instead } of patterns) {
      for (const match of text.matchAll(pattern)) {
        const list = found.get(file) ?? [];
        list.push(`${file}:${lineOf(text, match.index)}: ${instead}`);
        found.set(file, list);
      }
    }
  }
  const more = [...found].filter(([file, lines]) => lines.length > (known[file] ?? 0)).flatMap(([, lines]) => lines);
  assert.deepEqual(more, [], `new ${what} in test/:\n${more.join('\n')}`);
  const fewer = Object.entries(known)
    .filter(([file, count]) => (found.get(file)?.length ?? 0) < count)
    .map(([file, count]) => `${file}: ${found.get(file)?.length ?? 0} left, ${knownName} says ${count}`);
  assert.deepEqual(fewer, [], `fewer than ${knownName} says (lower it in ${THIS_FILE}):\n${fewer.join('\n')}`);
}

test('no sleep, polling loop of its own or stopwatch in test/ beyond the known ones, and the known ones only go', async () => {
  await assertOnlyKnown(FORBIDDEN, KNOWN, 'KNOWN', 'sleeps, polling loops or stopwatches');
});

test('no row dated back, stopwatch, race against a timer or sleep of a second in test/ beyond the known ones', async () => {
  await assertOnlyKnown(
    TIME_FAKED,
    KNOWN_TIME_FAKED,
    'KNOWN_TIME_FAKED',
    'rows dated back, stopwatches, races against a timer or long sleeps',
  );
});

test('the time rules see what they are meant to see', () => {
  const seen = (text: string) => TIME_FAKED.filter(({ pattern }) => text.match(pattern) !== null).length;
  for (const faked of [
    "update idempotency_keys set created_at = now() - interval '25 hours'",
    'last_seen_at: sql<Date>`now() - make_interval(secs => 91)`',
    '.set({ expires_at: new Date(Date.now() - 1000) })',
    "assert.ok(Date.now() - started < 3000, 'quick')",
    "await Promise.race([closed, new Promise((resolve) => setTimeout(() => resolve('hung'), 5_000))])",
    'await sleep(1_000);',
    'await delay(2000)',
  ])
    assert.equal(seen(faked), 1, faked);
  for (const honest of [
    "values (now() + interval '1 hour')",
    'locked_until = ${clock.now()}::timestamptz + make_interval(secs => 120)',
    'await sleep(300);',
    'expires_at: new Date(Date.now() + 3600_000)',
    'await Promise.race([a, b])',
  ])
    assert.equal(seen(honest), 0, honest);
});

test('a file that waits gives its tests a limit (test from support/limited-test.ts, or a timeout of its own)', async () => {
  const missing = (await testSources())
    .filter(({ file }) => file.endsWith('.test.ts'))
    .filter(({ text }) => /\b(eventually|pause|waitForRevision)\(/.test(text))
    .filter(({ text }) => !/support\/limited-test\.ts'|\bPER_TEST\b|\btimeout: [\d_]/.test(text))
    .map(({ file }) => file);
  assert.deepEqual(missing, []);
});

test(`no test gives itself more than MAX_TEST_SECONDS (${MAX_TEST_SECONDS} s), and a file's limit is above it`, async () => {
  const over: string[] = [];
  for (const { file, text } of await testSources()) {
    for (const match of text.matchAll(/\btimeout: ([\d_]+(?: \* [\d_]+)*)\s*[,}]/g)) {
      const ms = match[1]!.split(' * ').reduce((product, n) => product * Number(n.replaceAll('_', '')), 1);
      if (ms > MAX_TEST_SECONDS * 1000) over.push(`${file}:${lineOf(text, match.index)}: ${ms / 1000} s`);
    }
  }
  assert.deepEqual(over, []);
  const runner = await fs.readFile('scripts/run-tests.ts', 'utf8');
  assert.match(
    runner,
    /const TEST_TIMEOUT_MS = \(MAX_TEST_SECONDS \+/,
    "the runner's limit per file is above a test's",
  );
});

test('every pause says why and is short: a longer wait for time to pass is a clock or a condition', async () => {
  const unexplained: string[] = [];
  for (const { file, text } of await testSources()) {
    for (const match of text.matchAll(/\bpause\(\s*([\d_]+)\s*,\s*(['"`])/g)) {
      if (Number(match[1]!.replaceAll('_', '')) > MAX_PAUSE_MS)
        unexplained.push(`${file}:${lineOf(text, match.index)}: over ${MAX_PAUSE_MS} ms`);
    }
    for (const match of text.matchAll(/\bpause\(\s*[^,)]+\)/g))
      unexplained.push(`${file}:${lineOf(text, match.index)}: no reason given`);
  }
  assert.deepEqual(unexplained, []);
  await assert.rejects(pause(MAX_PAUSE_MS + 1, 'too long'), /at most/);
});
