/**
 * A sandbox whose setup meets the host's mounts changing (src/dataplane/process-runner.ts,
 * SETUP_ATTEMPTS): bubblewrap binds the host's tree, then remounts each mount in it read-only from the
 * list it read first, and a mount removed meanwhile (another deployment's disk image unmounted, as seen
 * in this suite with three files at once) fails the setup before the command runs. An app's first start
 * failing so failed its deploy. The start is tried again, and says so; after its last try the failure is
 * the command's, with bubblewrap's words. The race itself cannot be made to happen on demand: the
 * bubblewrap here is a wrapper that fails as the real one does for its first N sandboxes (the sandbox's own
 * probes at its creation are passed through): a real sandbox, reported as the real one reports it before
 * it makes its mounts, that writes bubblewrap's words and exits 1 instead of running the command. Then
 * it runs the real one.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { findExecutable } from '../../src/dataplane/executables.ts';
import { runToEnd } from '../../src/dataplane/process-runner.ts';
import { createResourceControl, type ResourceControl } from '../../src/dataplane/resource-limits.ts';
import { createSandbox } from '../../src/dataplane/sandbox.ts';
import { test } from '../support/limited-test.ts';

const logger = { info: () => undefined, warn: () => undefined };
const PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';
const bwrap = await findExecutable('bwrap');

/** bubblewrap's own words when a mount under / went away between its listing and its remount. */
const RACE =
  "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount " +
  '"/newroot/tmp/slipway-data-x/deployments/d": Invalid argument';

let scratch: string;
let limits: ResourceControl;

before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-mounts-retry-'));
  await fs.chmod(scratch, 0o711);
  limits = await createResourceControl({ root: path.join(scratch, 'no-cgroups'), logger });
});
after(async () => {
  await limits.dispose();
  await fs.rm(scratch, { recursive: true, force: true });
});

/** A bubblewrap that fails as above for its first `failures` sandboxes, then is the real one; and its count. */
async function flakyBwrap(failures: number): Promise<{ file: string; sandboxes: () => Promise<number> }> {
  // bubblewrap runs as the command's user here (a uid of its own when root): its count is in a
  // directory that user may write.
  const own = path.join(scratch, `bwrap-${failures}`);
  await fs.mkdir(own, { mode: 0o777 });
  await fs.chmod(own, 0o777);
  const counter = path.join(own, 'count');
  const file = path.join(own, 'bwrap.sh');
  // The failing ones are real sandboxes, reported on the info fd as bubblewrap reports one before it
  // makes its mounts, whose command is replaced by bubblewrap's words and its exit status.
  const fails = `printf "${RACE.replaceAll("'", '\\047').replaceAll('"', '\\042')}\\n" >&2; exit 1`;
  await fs.writeFile(
    file,
    // Only the test's command (not the sandbox's own probes at its creation).
    `#!/bin/sh\ncase " $* " in *"${MARK}"*) ;; *) exec ${bwrap} "$@" ;; esac\n` +
      `n=$(cat ${counter} 2>/dev/null || echo 0)\necho $((n + 1)) > ${counter}\n` +
      `if [ "$n" -lt ${failures} ]; then\n` +
      `  for a in "$@"; do shift; case "$a" in *"${MARK}"*) a='${fails}' ;; esac; set -- "$@" "$a"; done\n` +
      `fi\nexec ${bwrap} "$@"\n`,
    { mode: 0o755 },
  );
  return { file, sandboxes: async () => Number(await fs.readFile(counter, 'utf8').catch(() => '0')) };
}

async function run(failures: number, command: string) {
  const fake = await flakyBwrap(failures);
  const dataDir = path.join(scratch, `data-${failures}`);
  await fs.mkdir(dataDir);
  const sandbox = await createSandbox({ mode: 'auto', dataDir, limits, logger, tools: { bwrap: fake.file } });
  const appDir = path.join(scratch, `app-${failures}`);
  await fs.mkdir(path.join(appDir, 'src'), { recursive: true });
  await sandbox.ownTree(appDir);
  const stdout: string[] = [];
  const stderr: string[] = [];
  const system: string[] = [];
  try {
    if (sandbox.kind !== 'bwrap') return null;
    const exit = await runToEnd({
      sandbox,
      run: { purpose: 'build', command: `${MARK} ${command}`, appDir, limits: null, name: `mounts-${failures}` },
      env: { PATH, HOME: '/tmp' },
      output: {
        write: (stream, chunk) => (stream === 'stdout' ? stdout : stderr).push(String(chunk)),
        system: (line) => system.push(line),
      },
      signal: new AbortController().signal,
    });
    return { exit, stdout: stdout.join(''), stderr: stderr.join(''), system, sandboxes: await fake.sandboxes() };
  } finally {
    await sandbox.dispose();
  }
}

/** What marks the test's own command to the wrapper. */
const MARK = ': the-test-command;';

const skip = bwrap === null ? 'no bubblewrap' : false;

test('a sandbox that met the mounts changing is set up again, and the command runs once', { skip }, async (t) => {
  const result = await run(1, 'echo ran');
  if (result === null) return t.skip('bubblewrap cannot make namespaces here');
  assert.equal(result.exit.code, 0, JSON.stringify(result));
  assert.equal(result.stdout, 'ran\n');
  assert.equal(result.sandboxes, 2);
  assert.deepEqual(
    result.system.filter((line) => /mounts changed/.test(line)),
    ["The sandbox could not be set up while the host's mounts changed; starting it again (2 of 3)"],
  );
});

test("a sandbox that keeps meeting it fails after its last try, with bubblewrap's words", { skip }, async (t) => {
  const result = await run(5, 'echo ran');
  if (result === null) return t.skip('bubblewrap cannot make namespaces here');
  assert.equal(result.exit.code, 1);
  assert.equal(result.stdout, '');
  assert.equal(result.sandboxes, 3, 'three tries, no more');
  assert.match(result.stderr, /Unable to apply mount flags: remount/);
  assert.equal(result.system.filter((line) => /mounts changed/.test(line)).length, 2);
});

test("a command's own failure is not tried again", { skip }, async (t) => {
  const result = await run(0, "echo 'no such module' >&2; exit 1");
  if (result === null) return t.skip('bubblewrap cannot make namespaces here');
  assert.equal(result.exit.code, 1, JSON.stringify(result));
  assert.equal(result.sandboxes, 1);
  assert.deepEqual(
    result.system.filter((line) => /mounts changed/.test(line)),
    [],
  );
});
