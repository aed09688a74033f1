/**
 * The seccomp filter every sandboxed build and app runs under (bubblewrap's `--seccomp FD`): system
 * calls an app never needs fail with EPERM, everything else is allowed. The list follows what Docker's
 * and Podman's default profiles refuse to a process without capabilities (kernel modules, kexec,
 * reboot, mounts, BPF, performance counters, the kernel keyring, userfaultfd, io_uring, the clock,
 * swap, quotas, the kernel log, file handles, 32-bit vm86, ...), plus the two terminal ioctls that
 * inject input or drive the console (TIOCSTI, TIOCLINUX), as Flatpak refuses them.
 *
 * The program is compiled by libseccomp through its Python bindings (Debian package `python3-seccomp`)
 * rather than written by hand: libseccomp knows each architecture's numbers and writes the test of the
 * architecture at the top of the program. On x86_64 the filter also covers the i386 and x32 system call
 * tables (a process could otherwise reach a refused call through `int 0x80` or the x32 numbers); a call
 * from any other architecture kills the process (libseccomp's default for one it was not told of).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { findExecutable } from './executables.ts';

const run = promisify(execFile);

/** System calls refused with EPERM, by why an app never needs them. */
export const REFUSED_SYSCALLS = {
  'the kernel itself: modules, kexec, reboot, swap, accounting, its log, its clock': [
    'init_module',
    'finit_module',
    'delete_module',
    'create_module',
    'query_module',
    'get_kernel_syms',
    'kexec_load',
    'kexec_file_load',
    'reboot',
    'swapon',
    'swapoff',
    'acct',
    'syslog',
    'settimeofday',
    'stime',
    'clock_settime',
    'clock_adjtime',
    'nfsservctl',
    'lookup_dcookie',
    'sysfs',
    '_sysctl',
    'ustat',
    'uselib',
  ],
  'mounts and namespaces (the sandbox made them; an app has no capability for them anyway)': [
    'mount',
    'umount',
    'umount2',
    'pivot_root',
    'fsopen',
    'fsconfig',
    'fsmount',
    'fspick',
    'move_mount',
    'open_tree',
    'mount_setattr',
    'setns',
    'quotactl',
    'quotactl_fd',
    'open_by_handle_at',
    'name_to_handle_at',
  ],
  'kernel surfaces with a history of exploits, refused by default profiles': [
    'bpf',
    'perf_event_open',
    'userfaultfd',
    'keyctl',
    'add_key',
    'request_key',
    'io_uring_setup',
    'io_uring_enter',
    'io_uring_register',
    'kcmp',
  ],
  'hardware and 32-bit x86 leftovers': ['iopl', 'ioperm', 'vm86', 'vm86old'],
} as const;

/** The ioctl requests refused: TIOCSTI (push input into a terminal) and TIOCLINUX (drive the console). */
export const REFUSED_IOCTLS = { TIOCSTI: 0x5412, TIOCLINUX: 0x541c } as const;

/**
 * The compiler, run by python3 with the names as arguments; the program on stdout. The request of an
 * ioctl is compared in its low 32 bits only (the kernel reads it as an unsigned int, while a caller may
 * pass it sign-extended).
 */
const COMPILER = `
import errno, sys, seccomp
f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
if seccomp.system_arch() & 0xffffffff == seccomp.Arch.X86_64 & 0xffffffff:
    f.add_arch(seccomp.Arch.X86)
    f.add_arch(seccomp.Arch.X32)
deny = seccomp.ERRNO(errno.EPERM)
ioctls, names = sys.argv[1].split(','), sys.argv[2:]
for name in names:
    f.add_rule(deny, name)
for request in ioctls:
    f.add_rule(deny, 'ioctl', seccomp.Arg(1, seccomp.MASKED_EQ, 0xffffffff, int(request)))
sys.stdout.flush()
f.export_bpf(sys.stdout)
`;

export type SeccompFilter = { program: Buffer; problem: null } | { program: null; problem: string };

/**
 * Compiles the filter for this machine, once at start. Debian's own python3 is tried first (a Python
 * of pyenv or a virtualenv earlier on PATH lacks Debian's bindings). Null program: why there is none,
 * for the start log.
 */
export async function compileSeccompFilter(): Promise<SeccompFilter> {
  const candidates = [...new Set(['/usr/bin/python3', await findExecutable('python3')])];
  const args = ['-c', COMPILER, Object.values(REFUSED_IOCTLS).join(','), ...Object.values(REFUSED_SYSCALLS).flat()];
  let said = 'python3 is not installed';
  for (const python of candidates) {
    if (python === null) continue;
    try {
      const { stdout } = await run(python, args, { encoding: 'buffer', timeout: 30_000 });
      // A program is a whole number of 8-byte instructions, and begins by loading the architecture.
      if (stdout.length > 0 && stdout.length % 8 === 0) return { program: stdout, problem: null };
      said = `${python} wrote no filter`;
    } catch (error) {
      const stderr = ((error as { stderr?: Buffer | string }).stderr ?? '').toString().trim();
      said = stderr.includes("No module named 'seccomp'")
        ? `libseccomp's Python bindings are not installed (Debian package python3-seccomp)`
        : `${python} could not compile it: ${stderr.split('\n').slice(-1)[0] || String(error)}`;
    }
  }
  return { program: null, problem: said };
}
