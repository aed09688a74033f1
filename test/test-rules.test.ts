/**
 * The suite's rules about time (docs in the README, "Development"; test/support/wait.ts): a test waits for
 * a condition with `eventually` (a deadline in seconds, the condition named in its failure), lets time pass
 * only through `pause` (short, with its reason) or a clock it moves (test/support/clock.ts), never measures
 * how long something took, and a file that can wait gives each test the per-test limit. These checks read
 * test/ as text, so a new sleep, polling loop of its own or stopwatch fails here by file and line.
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

test('no sleep, polling loop of its own or stopwatch in test/ beyond the known ones, and the known ones only go', async () => {
  const found = new Map<string, string[]>();
  for (const { file, text } of await testSources()) {
    for (const { pattern, instead } of FORBIDDEN) {
      for (const match of text.matchAll(pattern)) {
        const list = found.get(file) ?? [];
        list.push(`${file}:${lineOf(text, match.index)}: ${instead}`);
        found.set(file, list);
      }
    }
  }
  const more = [...found].filter(([file, lines]) => lines.length > (KNOWN[file] ?? 0)).flatMap(([, lines]) => lines);
  assert.deepEqual(more, [], `new sleeps, polling loops or stopwatches in test/:\n${more.join('\n')}`);
  const fewer = Object.entries(KNOWN)
    .filter(([file, count]) => (found.get(file)?.length ?? 0) < count)
    .map(([file, count]) => `${file}: ${found.get(file)?.length ?? 0} left, KNOWN says ${count}`);
  assert.deepEqual(fewer, [], `fewer than KNOWN says (lower it in ${THIS_FILE}):\n${fewer.join('\n')}`);
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
