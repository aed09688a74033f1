/**
 * Finds the Debian tools the data plane runs (bubblewrap, slirp4netns, socat, HAProxy, setpriv) in the
 * system's own directories, never through the service's PATH: a PATH entry an operator's shell added
 * should not decide which binary contains apps or serves their traffic.
 */
import fs from 'node:fs/promises';
import path from 'node:path';

const SYSTEM_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/** The first executable file of that name in the system directories, or null. */
export async function findExecutable(name: string, dirs: readonly string[] = SYSTEM_DIRS): Promise<string | null> {
  for (const dir of dirs) {
    const candidate = path.join(dir, name);
    try {
      await fs.access(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // Not here; try the next place.
    }
  }
  return null;
}
