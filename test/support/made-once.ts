/**
 * What one run of the suite makes once and its files share instead of making it each (the compiled
 * service, test/support/compiled-build.ts; the LangGraph example's install, test/support/langgraph-
 * example.ts): each takes a minute or so of both cores, and several files need the same.
 *
 * `SLIPWAY_TEST_BUILD_DIR` names the directory one run shares (scripts/run-tests.ts makes one per run;
 * .ci/run one for all its steps); a file run without it makes its own, in a directory added to `scratch`
 * (the directories the file removes). Files running at once agree through the file system: the first to
 * make `<dir>/<name>` makes it, the others wait for its `<name>.done` (or `<name>.failed`) marker.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { eventually } from './wait.ts';

export interface MadeOnce {
  /** The name of the directory made, in the run's shared directory. */
  name: string;
  /** What it is, for the failure of a file that waited for another's ("the compiled service"). */
  what: string;
  /** How long a file waits for another's, in seconds: a hang guard. */
  waitSeconds: number;
  /** Makes it into `dir` (already made, empty). */
  make(dir: string): Promise<void>;
}

/** The directory `made.make` filled, this run's: made by this call, or by another file's. */
export async function madeOncePerRun(made: MadeOnce, scratch: string[]): Promise<string> {
  const shared = process.env.SLIPWAY_TEST_BUILD_DIR;
  const base = shared ?? (await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-test-shared-')));
  if (shared === undefined) scratch.push(base);
  const dir = path.join(base, made.name);
  const done = path.join(base, `${made.name}.done`);
  const failed = path.join(base, `${made.name}.failed`);
  const mine = await fs.mkdir(dir).then(
    () => true,
    (error: NodeJS.ErrnoException) => {
      if (error.code === 'EEXIST') return false;
      throw error;
    },
  );
  if (mine) {
    try {
      await made.make(dir);
      await fs.writeFile(done, '');
    } catch (error) {
      await fs.writeFile(failed, String(error instanceof Error ? error.message : error));
      throw error;
    }
    return dir;
  }
  await eventually(
    `${made.what}, which another test file is making`,
    async () => {
      const why = await fs.readFile(failed, 'utf8').catch(() => null);
      if (why !== null) throw new Error(`${made.what}, made by another test file, failed: ${why}`);
      return fs.access(done).then(
        () => true,
        () => false,
      );
    },
    { seconds: made.waitSeconds, everyMs: 500 },
  );
  return dir;
}
