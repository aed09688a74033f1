/**
 * The app edge's directory and the files HAProxy reads from it (src/dataplane/edge-haproxy.ts): the
 * directory taken over by one edge, the certificate and key in one file, and the configuration and maps
 * written from the routing table, each replaced whole (written beside it, then renamed) so that a start of
 * HAProxy never reads half of one.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { mapLine } from './edge-haproxy-config.ts';
import type { EdgeSwitch } from './edge-haproxy-switch.ts';

/** The files of the edge's directory. */
export interface EdgeFiles {
  configFile: string;
  /** HAProxy's maps: host to backend, paused hosts, host to traffic split. */
  mapFile: string;
  pausedMapFile: string;
  splitMapFile: string;
  /** HAProxy's runtime API. */
  adminSocket: string;
  /** The token of the edge that owns the directory. */
  ownerFile: string;
  /** HAProxy's pid file (its configuration names it). */
  pidFile: string;
}

export function edgeFiles(dir: string): EdgeFiles {
  return {
    configFile: path.join(dir, 'haproxy.cfg'),
    mapFile: path.join(dir, 'routes.map'),
    pausedMapFile: path.join(dir, 'paused.map'),
    splitMapFile: path.join(dir, 'split.map'),
    adminSocket: path.join(dir, 'admin.sock'),
    ownerFile: path.join(dir, 'owner'),
    pidFile: path.join(dir, 'haproxy.pid'),
  };
}

/**
 * Makes the directory (the service's own) and takes it over; returns whether this edge still owns it.
 * The owner file is written before an earlier HAProxy is stopped, so that the edge that started that one
 * (still running, say) sees it was taken over and does not start its HAProxy again (which would stop
 * this one's in turn, and both would serve the port by turns).
 */
export async function takeOverDirectory(dir: string, files: EdgeFiles): Promise<() => Promise<boolean>> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.chmod(dir, 0o700);
  const ownerToken = randomUUID();
  await fs.writeFile(files.ownerFile, ownerToken, { mode: 0o600 });
  return async () => (await fs.readFile(files.ownerFile, 'utf8').catch(() => '')).trim() === ownerToken;
}

/** HAProxy reads the chain and the key from one file: written in the directory, its path returned. */
export async function writeTlsPem(dir: string, tls: { certFile: string; keyFile: string }): Promise<string> {
  const tlsPemFile = path.join(dir, 'apps.pem');
  const pem = [await fs.readFile(tls.certFile, 'utf8'), await fs.readFile(tls.keyFile, 'utf8')];
  await fs.writeFile(tlsPemFile, pem.map((p) => p.trimEnd()).join('\n') + '\n', { mode: 0o600 });
  return tlsPemFile;
}

/** Replaces the file with this text: written beside it, then renamed over it. */
async function replaceFile(file: string, text: string): Promise<void> {
  await fs.writeFile(`${file}.next`, text, { mode: 0o600 });
  await fs.rename(`${file}.next`, file);
}

/** Writes the configuration (rendered from the table) and the three maps of the table's routes. */
export async function writeEdgeFiles(
  files: EdgeFiles,
  config: string,
  routing: EdgeSwitch,
  appsDomain: string,
): Promise<void> {
  await replaceFile(files.configFile, config);
  const map = [...routing.backends()].map(([slug, backend]) => mapLine(slug, appsDomain, backend)).join('\n');
  await replaceFile(files.mapFile, map === '' ? '' : `${map}\n`);
  const paused = routing.pausedSlugs().map((slug) => `${slug}.${appsDomain} 1\n`);
  await replaceFile(files.pausedMapFile, paused.join(''));
  const splits = routing.splitLines().map((line) => `${line}\n`);
  await replaceFile(files.splitMapFile, splits.join(''));
}
