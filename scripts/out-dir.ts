/** The build scripts' `--out-dir DIR` argument: the directory given, or the script's own default. */
import path from 'node:path';

export function outDirOf(args: readonly string[], fallback: string): string {
  const at = args.indexOf('--out-dir');
  if (at === -1) return fallback;
  const value = args[at + 1];
  if (!value) throw new Error('--out-dir needs a directory');
  return path.resolve(value);
}
