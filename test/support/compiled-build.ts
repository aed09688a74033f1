/**
 * The compiled service (`npm run build`, scripts/build.ts), built once and shared by the test files that
 * run it (test/ops/install.test.ts, test/ops/compiled-service-user.test.ts) instead of a build each: the
 * build compiles all of src/ and the packages, a minute or more of both cores.
 *
 * Laid out as the install docs put it: `<dir>/dist` (the build) beside `<dir>/node_modules` (the
 * production dependencies, a link to the checkout's), readable by every user (the compiled service also
 * runs as the system user `slipway`). The tests only read it.
 *
 * `SLIPWAY_TEST_BUILD_DIR` names the directory one run of the suite shares (scripts/run-tests.ts makes
 * one per run; .ci/run one for all its steps); a file run without it builds its own. Files running at
 * once agree through the file system: the first to make `<dir>/build` builds, the others wait for its
 * `done` (or `failed`) marker.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { eventually } from './wait.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

/** How long a file waits for another's build, in seconds: a hang guard (a build takes minutes at most). */
const BUILD_WAIT_SECONDS = 480;

/**
 * The directory holding `dist` (the compiled service) and `node_modules`, built at the first call; a build
 * of the file's own (no shared directory) is added to `scratch`, the directories the file removes.
 */
export async function compiledService(scratch: string[]): Promise<string> {
  const shared = process.env.SLIPWAY_TEST_BUILD_DIR;
  const base = shared ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-build-')));
  if (shared === undefined) scratch.push(base);
  const dir = path.join(base, 'build');
  const done = path.join(base, 'done');
  const failed = path.join(base, 'failed');
  const mine = await fs.mkdir(dir).then(
    () => true,
    (error: NodeJS.ErrnoException) => {
      if (error.code === 'EEXIST') return false;
      throw error;
    },
  );
  if (mine) {
    try {
      await fs.chmod(base, 0o755);
      await fs.chmod(dir, 0o755);
      await fs.symlink(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
      await run(process.execPath, ['--import', 'tsx', 'scripts/build.ts', '--out-dir', path.join(dir, 'dist')], {
        cwd: ROOT,
        maxBuffer: 64 * 1024 * 1024,
      });
      await fs.writeFile(done, '');
    } catch (error) {
      await fs.writeFile(failed, String(error instanceof Error ? error.message : error));
      throw error;
    }
    return dir;
  }
  await eventually(
    'the compiled service another test file is building',
    async () => {
      const why = await fs.readFile(failed, 'utf8').catch(() => null);
      if (why !== null) throw new Error(`the shared build failed: ${why}`);
      return fs.access(done).then(
        () => true,
        () => false,
      );
    },
    { seconds: BUILD_WAIT_SECONDS, everyMs: 500 },
  );
  return dir;
}
