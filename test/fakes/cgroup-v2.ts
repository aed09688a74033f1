/**
 * A fake cgroup v2 hierarchy in a temporary directory, for the parts of the kernel's interface that
 * src/dataplane/resource-limits.ts uses: a made directory gets the interface files of the controllers
 * its parent passes on (cgroup.controllers is the parent's cgroup.subtree_control), and writes follow the
 * kernel's rules that matter for placement: a controller can be enabled only when offered, and never
 * while the group holds processes ("no internal processes", the root group exempt); a process cannot
 * join a group that passes controllers on; rmdir fails while a group holds processes or children;
 * limit files take only well-formed values; cgroup.kill SIGKILLs the pids listed (real ones, which the
 * tests start themselves) and empties the subtree. Writes outside the writable (delegated) subtrees fail
 * with EACCES, as for a service that is not root, and so do writes in groups another user made there
 * (`foreign`: a root service's group, found by a service that runs as its own user).
 *
 * What it does not do: enforce anything. Real limits are tested on cgroup v1 (the test machine's).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { CgroupFs } from '../../src/dataplane/resource-limits.ts';

/** The kernel lists controllers in this order. */
const KNOWN = ['cpuset', 'cpu', 'io', 'memory', 'hugetlb', 'pids', 'rdma', 'misc'];

const CORE_FILES: Record<string, string> = {
  'cgroup.procs': '',
  'cgroup.subtree_control': '\n',
  'cgroup.kill': '',
  'cgroup.events': 'populated 0\nfrozen 0\n',
};

function controllerFiles(controller: string, swap: boolean, idle: boolean): Record<string, string> {
  switch (controller) {
    case 'memory':
      return {
        'memory.max': 'max\n',
        ...(swap ? { 'memory.swap.max': 'max\n' } : {}),
        'memory.current': '0\n',
        'memory.events': 'low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n',
      };
    case 'cpu':
      return {
        'cpu.max': 'max 100000\n',
        'cpu.weight': '100\n',
        ...(idle ? { 'cpu.idle': '0\n' } : {}),
        'cpu.stat':
          'usage_usec 0\nuser_usec 0\nsystem_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n',
        'cpu.pressure':
          'some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n',
      };
    case 'pids':
      return { 'pids.max': 'max\n', 'pids.current': '0\n' };
    default:
      return {};
  }
}

const LIMIT_VALUE: Record<string, RegExp> = {
  'memory.max': /^(max|\d+)\n?$/,
  'memory.swap.max': /^(max|\d+)\n?$/,
  'pids.max': /^(max|\d+)\n?$/,
  'cpu.max': /^(max|\d+)( \d+)?\n?$/,
  // 1 to 10000, as the kernel takes it.
  'cpu.weight': /^([1-9]\d{0,3}|10000)\n?$/,
  'cpu.idle': /^[01]\n?$/,
};

function fail(code: string, syscall: string, file: string): Error {
  return Object.assign(new Error(`${code}: ${syscall} '${file}'`), { code, syscall, path: file });
}

function sortControllers(list: Iterable<string>): string[] {
  return [...new Set(list)].sort((a, b) => KNOWN.indexOf(a) - KNOWN.indexOf(b));
}

export interface FakeCgroupV2Options {
  /** What the root offers (its cgroup.controllers); default all of KNOWN. */
  controllers?: string[];
  /** Whether memory.swap.max exists (swap accounting); default true. */
  swap?: boolean;
  /** Whether cpu.idle exists (Linux 5.15 and later); default true. */
  idle?: boolean;
  /**
   * Groups (paths relative to the root, like `system.slice/slipway.service`) whose subtree the service
   * may write; default everything (root). The root group itself is writable only with the default.
   */
  writable?: string[];
  /** Whether the root is the real root, exempt from "no internal processes"; false for a container's. */
  rootExempt?: boolean;
  /** Groups another user made (paths relative to the root): nothing in their subtree is writable. */
  foreign?: string[];
}

export interface FakeCgroupV2 {
  readonly root: string;
  readonly fs: CgroupFs;
  /** Makes a group and its missing ancestors (as systemd would), optionally with processes and enabled controllers. */
  group(relative: string, options?: { procs?: number[]; subtreeControl?: string[] }): Promise<void>;
  /** A file's contents, for assertions. */
  read(relative: string, file: string): Promise<string>;
  /** Sets a file as the kernel would (memory.events after an OOM kill, say). */
  set(relative: string, file: string, contents: string): Promise<void>;
  cleanup(): Promise<void>;
}

export async function createFakeCgroupV2(options: FakeCgroupV2Options = {}): Promise<FakeCgroupV2> {
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-cgroup2-'));
  const swap = options.swap ?? true;
  const idle = options.idle ?? true;
  const rootExempt = options.rootExempt ?? true;
  const relativeOf = (dir: string) => path.relative(root, dir);
  const inside = (file: string) => {
    const relative = relativeOf(file);
    return relative === '' || (!relative.startsWith('..') && !path.isAbsolute(relative));
  };
  const within = (relative: string, groups: string[]) =>
    groups.some((w) => relative === w || relative.startsWith(`${w}/`));
  const mayWrite = (dir: string): boolean => {
    const relative = relativeOf(dir);
    if (within(relative, options.foreign ?? [])) return false;
    return !options.writable || within(relative, options.writable);
  };
  const isGroup = (dir: string) =>
    fs.access(path.join(dir, 'cgroup.procs')).then(
      () => true,
      () => false,
    );
  const readWords = async (dir: string, file: string) =>
    (await fs.readFile(path.join(dir, file), 'utf8')).split(/\s+/).filter(Boolean);
  const procs = async (dir: string) => (await readWords(dir, 'cgroup.procs')).map(Number);
  const childGroups = async (dir: string) => {
    const entries = await fs.readdir(dir, { withFileTypes: true });
    return entries.filter((e) => e.isDirectory()).map((e) => path.join(dir, e.name));
  };
  const allGroups = async (dir: string): Promise<string[]> => [
    dir,
    ...(await Promise.all((await childGroups(dir)).map(allGroups))).flat(),
  ];

  const writeFiles = async (dir: string, files: Record<string, string>) => {
    for (const [name, contents] of Object.entries(files)) {
      await fs.writeFile(path.join(dir, name), contents, { flag: 'wx' }).catch(() => undefined);
    }
  };
  /** A group's controllers changed: its interface files follow (the kernel adds and removes them). */
  const offer = async (dir: string, controllers: string[]) => {
    await fs.writeFile(path.join(dir, 'cgroup.controllers'), `${sortControllers(controllers).join(' ')}\n`);
    for (const controller of KNOWN) {
      const files = controllerFiles(controller, swap, idle);
      if (controllers.includes(controller)) await writeFiles(dir, files);
      else for (const name of Object.keys(files)) await fs.rm(path.join(dir, name), { force: true });
    }
  };

  await fs.writeFile(
    path.join(root, 'cgroup.controllers'),
    `${sortControllers(options.controllers ?? KNOWN).join(' ')}\n`,
  );
  await fs.writeFile(path.join(root, 'cgroup.subtree_control'), '\n');
  await fs.writeFile(path.join(root, 'cgroup.procs'), '1\n');

  const io: CgroupFs = {
    readFile: (file) => fs.readFile(file, 'utf8'),
    subgroups: async (dir) => (await childGroups(dir)).map((child) => path.basename(child)),
    exists: (file) =>
      fs.access(file).then(
        () => true,
        () => false,
      ),
    async mkdir(dir) {
      const parentDir = path.dirname(dir);
      if (!inside(dir) || !(await isGroup(parentDir))) throw fail('ENOENT', 'mkdir', dir);
      if (!mayWrite(parentDir)) throw fail('EACCES', 'mkdir', dir);
      await fs.mkdir(dir);
      await writeFiles(dir, CORE_FILES);
      await offer(dir, await readWords(parentDir, 'cgroup.subtree_control'));
    },
    async rmdir(dir) {
      if (path.resolve(dir) === path.resolve(root)) throw fail('EBUSY', 'rmdir', dir);
      if (!(await isGroup(dir))) throw fail('ENOENT', 'rmdir', dir);
      if (!mayWrite(path.dirname(dir))) throw fail('EACCES', 'rmdir', dir);
      if ((await procs(dir)).length > 0 || (await childGroups(dir)).length > 0) throw fail('EBUSY', 'rmdir', dir);
      await fs.rm(dir, { recursive: true });
    },
    async writeFile(file, data) {
      const dir = path.dirname(file);
      const name = path.basename(file);
      if (!inside(file) || !(await io.exists(file))) throw fail('ENOENT', 'open', file);
      if (!mayWrite(dir)) throw fail('EACCES', 'open', file);
      const isRoot = path.resolve(dir) === path.resolve(root);
      if (name === 'cgroup.subtree_control') {
        const offered = await readWords(dir, 'cgroup.controllers');
        const enabled = new Set(await readWords(dir, name));
        for (const token of data.split(/\s+/).filter(Boolean)) {
          const match = /^([+-])([a-z_]+)$/.exec(token);
          if (!match) throw fail('EINVAL', 'write', file);
          const [, sign, controller] = match as unknown as [string, string, string];
          if (!offered.includes(controller)) throw fail('ENOENT', 'write', file);
          if (sign === '+') {
            if (!(isRoot && rootExempt) && (await procs(dir)).length > 0) throw fail('EBUSY', 'write', file);
            enabled.add(controller);
          } else {
            for (const child of await childGroups(dir)) {
              if ((await readWords(child, name)).includes(controller)) throw fail('EBUSY', 'write', file);
            }
            enabled.delete(controller);
          }
        }
        await fs.writeFile(file, `${sortControllers(enabled).join(' ')}\n`);
        for (const child of await childGroups(dir)) await offer(child, [...enabled]);
        return;
      }
      if (name === 'cgroup.procs') {
        const pid = Number(data.trim());
        if (!Number.isSafeInteger(pid) || pid <= 0) throw fail('EINVAL', 'write', file);
        if (!(isRoot && rootExempt) && (await readWords(dir, 'cgroup.subtree_control')).length > 0) {
          throw fail('EBUSY', 'write', file);
        }
        for (const group of await allGroups(root)) {
          const held = await procs(group);
          if (held.includes(pid)) {
            const rest = held.filter((p) => p !== pid);
            await fs.writeFile(path.join(group, name), rest.map((p) => `${p}\n`).join(''));
          }
        }
        await fs.appendFile(file, `${pid}\n`);
        return;
      }
      if (name === 'cgroup.kill') {
        if (data.trim() !== '1') throw fail('EINVAL', 'write', file);
        for (const group of await allGroups(dir)) {
          for (const pid of await procs(group)) {
            try {
              process.kill(pid, 'SIGKILL');
            } catch {
              // Already gone.
            }
          }
          await fs.writeFile(path.join(group, 'cgroup.procs'), '');
        }
        return;
      }
      const format = LIMIT_VALUE[name];
      if (!format) throw fail('EACCES', 'open', file);
      if (!format.test(data)) throw fail('EINVAL', 'write', file);
      // An idle group has the least weight there is, and takes no other.
      const idleNow = await fs.readFile(path.join(dir, 'cpu.idle'), 'utf8').catch(() => '0');
      if (name === 'cpu.weight' && idleNow.trim() === '1') throw fail('EINVAL', 'write', file);
      await fs.writeFile(file, data.endsWith('\n') ? data : `${data}\n`);
    },
  };

  return {
    root,
    fs: io,
    async group(relative, groupOptions = {}) {
      let dir = root;
      for (const part of relative.split('/').filter(Boolean)) {
        const parentDir = dir;
        dir = path.join(dir, part);
        if (!(await isGroup(dir))) {
          await fs.mkdir(dir);
          await writeFiles(dir, CORE_FILES);
          await offer(dir, await readWords(parentDir, 'cgroup.subtree_control'));
        }
      }
      if (groupOptions.subtreeControl) {
        const enabled = sortControllers(groupOptions.subtreeControl);
        await fs.writeFile(path.join(dir, 'cgroup.subtree_control'), `${enabled.join(' ')}\n`);
        for (const child of await childGroups(dir)) await offer(child, enabled);
      }
      if (groupOptions.procs) {
        await fs.writeFile(path.join(dir, 'cgroup.procs'), groupOptions.procs.map((p) => `${p}\n`).join(''));
      }
    },
    read: (relative, file) => fs.readFile(path.join(root, relative, file), 'utf8'),
    set: (relative, file, contents) => fs.writeFile(path.join(root, relative, file), contents),
    cleanup: () => fs.rm(root, { recursive: true, force: true }),
  };
}
