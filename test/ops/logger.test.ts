/**
 * One `pid` key per log line (docs/operations.md, "Logs"): the logger's own is the process's; a pid logged as a
 * field (another process's) must not make a second one, which JSON parsers resolve differently.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLogger } from '../../src/logger.ts';

test("a pid in a log call does not duplicate the line's pid key", () => {
  const lines: string[] = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(line) });
  logger.warn({ pid: 4242 }, 'stopping another process');
  logger.child({ component: 'x' }).info({ pid: 7 }, 'and from a child logger');
  for (const line of lines) {
    assert.equal(line.match(/"pid":/g)?.length, 1, line);
    assert.equal(JSON.parse(line).pid, process.pid, "the pid key is this process's");
  }
  assert.deepEqual(
    lines.map((l) => JSON.parse(l).otherPid),
    [4242, 7],
    'the other pid is kept, under its own key',
  );
});
