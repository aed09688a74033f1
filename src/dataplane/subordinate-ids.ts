/**
 * Subordinate ids (issue 33, item 6, without root): where the host gives the service's user a range in
 * /etc/subuid and /etc/subgid (Debian package `uidmap`: the setuid helpers newuidmap and newgidmap),
 * each deployment runs as a host uid of its own from that range, never the service's, as it does from
 * SLIPWAY_APP_UIDS when the service is root (src/dataplane/app-uids.ts).
 *
 * util-linux `unshare --map-root-user --map-users=...` makes a user namespace in which the service's
 * user is root and the given subordinate ids are themselves (newuidmap writes the map). The sandbox is
 * made inside it (src/dataplane/sandbox-user-mapping.ts), and the service's own work on a deployment's
 * files (giving them to its uid, sealing a build, removing a tree) runs inside one too: as root of a
 * namespace where only the service's user and the range are mapped, it may change files of those ids,
 * and nothing else on the host.
 *
 * What rules it out, each said at start: no newuidmap or newgidmap, no entry for the service's user, a
 * range of fewer than two ids, and no_new_privs (the systemd unit's NoNewPrivileges=, setpriv
 * --no-new-privs, a container's no-new-privileges, or anything implying it): newuidmap is setuid root,
 * and no_new_privs keeps its exec from gaining anything. The probe does the real thing once.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import { promisify } from 'node:util';
import { findExecutable } from './executables.ts';

const run = promisify(execFile);

/** A range of host ids, the same numbers as uids and gids. */
export interface IdRange {
  readonly first: number;
  readonly count: number;
}

export interface SubordinateIds {
  /** The ids of both /etc/subuid and /etc/subgid given to the service's user. */
  readonly range: IdRange;
  /** The uid everything no deployment owns runs as (the probe): the range's first. */
  readonly shared: number;
  /** The uids deployments get one each of: the rest of the range. */
  readonly deployments: IdRange;
  /**
   * The argv that runs a command in a user namespace of its own where the service's user is root and
   * `ids` (by default the whole range) are themselves.
   */
  prefix(ids?: IdRange): string[];
}

export type SubordinateIdsProbe = { ids: SubordinateIds; problem: null } | { ids: null; problem: string };

/** The file system paths read (tests give their own). */
export interface SubordinateIdFiles {
  subuid: string;
  subgid: string;
  status: string;
}

const FILES: SubordinateIdFiles = { subuid: '/etc/subuid', subgid: '/etc/subgid', status: '/proc/self/status' };

/** The first range of `file` for the user (by name or uid), or null. */
async function rangeOf(file: string, name: string, uid: number): Promise<IdRange | null> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    const [who, start, count] = line.trim().split(':');
    if (who !== name && who !== String(uid)) continue;
    const first = Number(start);
    const n = Number(count);
    if (Number.isSafeInteger(first) && Number.isSafeInteger(n) && first > 0 && n > 0) return { first, count: n };
  }
  return null;
}

/**
 * Whether this service (not root) can run each deployment as a subordinate uid of its own; when it
 * cannot, why, in words for the start log.
 */
export async function probeSubordinateIds(files: SubordinateIdFiles = FILES): Promise<SubordinateIdsProbe> {
  const uid = process.getuid?.() ?? 0;
  const name = os.userInfo().username;
  const refuse = (problem: string): SubordinateIdsProbe => ({ ids: null, problem });
  const [newuidmap, newgidmap, unshare] = await Promise.all(
    ['newuidmap', 'newgidmap', 'unshare'].map((tool) => findExecutable(tool)),
  );
  if (!newuidmap || !newgidmap) return refuse('newuidmap and newgidmap are not installed (Debian package uidmap)');
  if (!unshare) return refuse('unshare is not installed (Debian package util-linux)');
  const status = await fs.readFile(files.status, 'utf8').catch(() => '');
  if (/^NoNewPrivs:\s*1$/m.test(status))
    return refuse(
      "the service runs with no_new_privs (systemd NoNewPrivileges=yes, setpriv --no-new-privs or a container's no-new-privileges), which keeps the setuid newuidmap from mapping the range",
    );
  const uids = await rangeOf(files.subuid, name, uid);
  const gids = await rangeOf(files.subgid, name, uid);
  if (!uids || !gids)
    return refuse(
      `${name} has no subordinate range in ${uids ? files.subgid : files.subuid} (give it one no other user has: usermod --add-subuids FIRST-LAST --add-subgids FIRST-LAST ${name})`,
    );
  // The ids in both ranges: a deployment's uid is its gid too.
  const first = Math.max(uids.first, gids.first);
  const last = Math.min(uids.first + uids.count, gids.first + gids.count) - 1;
  if (last - first + 1 < 2)
    return refuse(`the subordinate ranges of ${name} in /etc/subuid and /etc/subgid share fewer than two ids`);
  const range = { first, count: last - first + 1 };
  const ids: SubordinateIds = {
    range,
    shared: first,
    deployments: { first: first + 1, count: range.count - 1 },
    prefix: (of = range) => [
      unshare,
      '--map-root-user',
      `--map-users=${of.first},${of.first},${of.count}`,
      `--map-groups=${of.first},${of.first},${of.count}`,
      '--',
    ],
  };
  // The real thing once: a namespace with the range mapped, where a file can be given to its first id.
  const [file, ...args] = ids.prefix();
  try {
    const { stdout } = await run(file!, [...args, '/bin/sh', '-c', 'cat /proc/self/uid_map'], { timeout: 10_000 });
    if (!stdout.split('\n').some((line) => line.trim().split(/\s+/)[0] === String(first)))
      return refuse(`unshare did not map the subordinate range (uid_map: ${stdout.trim().split('\n').join(' / ')})`);
  } catch (error) {
    const stderr = (error as { stderr?: unknown }).stderr;
    const said = (typeof stderr === 'string' ? stderr.trim() : '') || String(error);
    return refuse(`newuidmap could not map the subordinate range: ${said.split('\n').join(' / ')}`);
  }
  return { ids, problem: null };
}

/** Runs `argv` in a namespace where the service is root and the range is itself (see above). */
export async function runMapped(ids: SubordinateIds, argv: readonly string[]): Promise<void> {
  const [file, ...args] = [...ids.prefix(), ...argv];
  await run(file!, args);
}
