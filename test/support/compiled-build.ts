/**
 * The compiled service (`npm run build`, scripts/build.ts), built once and shared by the test files that
 * run it (test/ops/install.test.ts, test/ops/compiled-service-user.test.ts) instead of a build each: the
 * build compiles all of src/ and the packages, a minute or more of both cores.
 *
 * Laid out as the install docs put it: `<dir>/dist` (the build) beside `<dir>/node_modules` (the
 * production dependencies, a link to the checkout's), readable by every user (the compiled service also
 * runs as the system user `slipway`). The tests only read it.
 *
 * Made once per run of the suite (test/support/made-once.ts).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { madeOncePerRun } from './made-once.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

/** How long a file waits for another's build, in seconds: a hang guard (a build takes minutes at most). */
const BUILD_WAIT_SECONDS = 480;

/**
 * The directory holding `dist` (the compiled service) and `node_modules`, built at the first call; a build
 * of the file's own (no shared directory) is added to `scratch`, the directories the file removes.
 */
export async function compiledService(scratch: string[]): Promise<string> {
  return madeOncePerRun(
    {
      name: 'build',
      what: 'the compiled service',
      waitSeconds: BUILD_WAIT_SECONDS,
      make: async (dir) => {
        await fs.chmod(path.dirname(dir), 0o755);
        await fs.chmod(dir, 0o755);
        await fs.symlink(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
        await run(process.execPath, ['--import', 'tsx', 'scripts/build.ts', '--out-dir', path.join(dir, 'dist')], {
          cwd: ROOT,
          maxBuffer: 64 * 1024 * 1024,
        });
      },
    },
    scratch,
  );
}
