/**
 * What bench/test-start.ts starts: the harness every test file of the database and apps tiers loads
 * first (and through it the whole service), then this process's CPU seconds so far, on one line.
 */
import '../test/support/harness.ts';

const used = process.cpuUsage();
process.stdout.write(`${JSON.stringify((used.user + used.system) / 1e6)}\n`);
