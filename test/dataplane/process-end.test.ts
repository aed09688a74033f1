/**
 * A command's exit counts only once every process of it is gone (src/dataplane/process-runner.ts), so
 * that what it could write can be removed safely after: here a command that ignores SIGTERM and leaves
 * children that ignore it too, stopped with and without a sandbox and with no cgroup to empty (an
 * ordinary user's host without delegated cgroups). The moment `stop` resolves, none of them may be left.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startProcess } from '../../src/dataplane/process-runner.ts';
import { createResourceControl, type ResourceControl } from '../../src/dataplane/resource-limits.ts';
import { createSandbox, type Sandbox } from '../../src/dataplane/sandbox.ts';
import { processesMarked } from './data-plane-harness.ts';

const logger = { info: () => undefined, warn: () => undefined };
const PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';

let scratch: string;
let limits: ResourceControl;

before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-process-end-'));
  await fs.chmod(scratch, 0o711);
  // No cgroups (an empty directory as their root): what ends the processes is the sandbox or the group.
  limits = await createResourceControl({ root: path.join(scratch, 'no-cgroups'), logger });
});
after(async () => {
  await limits.dispose();
  await fs.rm(scratch, { recursive: true, force: true });
});

/** A shell that ignores SIGTERM and starts children that ignore it too, each marked, then waits. */
function stubborn(marker: string): string {
  const child = `node -e "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)" ${marker}`;
  return `trap '' TERM; ${child} & ${child} & (${child} &) ; exec ${child}`;
}

async function runStopped(sandbox: Sandbox, name: string): Promise<void> {
  const appDir = path.join(scratch, `${name}-app`);
  await fs.mkdir(path.join(appDir, 'src'), { recursive: true });
  await sandbox.ownTree(appDir);
  const marker = `stubborn-${randomBytes(6).toString('hex')}`;
  const output: string[] = [];
  const running = startProcess({
    sandbox,
    run: { purpose: 'build', command: stubborn(marker), appDir, limits: null, name },
    env: { PATH, HOME: '/tmp' },
    output: { write: (_stream, chunk) => output.push(String(chunk)), system: (line) => output.push(line) },
  });
  // All four are up before the stop.
  for (let i = 0; i < 400 && (await processesMarked(marker)).length < 4; i++)
    await new Promise((r) => setTimeout(r, 25));
  assert.equal((await processesMarked(marker)).length, 4, output.join(''));
  const exit = await running.stop(200);
  assert.deepEqual(await processesMarked(marker), [], `left running after stop resolved: ${output.join('')}`);
  assert.equal(exit.leftover, null);
}

describe('a stopped command has no process left when its stop resolves', () => {
  test('without a sandbox: its whole process group', async () => {
    const sandbox = await createSandbox({ mode: 'none', dataDir: path.join(scratch, 'none-data'), limits, logger });
    await runStopped(sandbox, 'bare');
  });

  test('under bubblewrap: its whole PID namespace', async (t) => {
    const dataDir = path.join(scratch, 'bwrap-data');
    await fs.mkdir(dataDir);
    const sandbox = await createSandbox({ mode: 'auto', dataDir, limits, logger });
    try {
      if (sandbox.kind !== 'bwrap') return t.skip('bubblewrap cannot make namespaces here');
      await runStopped(sandbox, 'sandboxed');
    } finally {
      await sandbox.dispose();
    }
  });
});
