/**
 * A host whose every CPU other work keeps busy: one ordinary process per CPU (`node` spinning), started
 * at ordinary priority outside every cgroup of Slipway's, as any neighbour's work is. Used by the
 * busy-host tests and by the data-plane benchmark.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';

export function keepCpusBusy(): { count: number; stop(): Promise<void> } {
  const hogs = Array.from({ length: os.availableParallelism() }, () =>
    spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }),
  );
  return {
    count: hogs.length,
    /** Kills every hog (SIGKILL) and resolves once they have all exited. */
    async stop() {
      await Promise.all(
        hogs.map(
          (hog) =>
            new Promise<void>((resolve) => {
              if (hog.exitCode !== null || hog.signalCode !== null) return resolve();
              hog.once('exit', () => resolve());
              hog.kill('SIGKILL');
            }),
        ),
      );
    },
  };
}
