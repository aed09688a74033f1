/**
 * The operator's package-registry settings in a build (docs/operations.md, "Package registries"): npm's
 * registry, scoped registries and their credentials (an npmrc), pip's index, extra indexes, find-links
 * and trusted hosts (a pip configuration file), a CA bundle, and proxies (src/config-registries.ts).
 * A build runs as another user with a HOME of its own, so none of the service user's settings reach it
 * by themselves.
 *
 * What a build gets: copies of the files in a directory of the build's own, outside its app directory
 * (shown read-only at /home/.registry in the sandbox, never part of the sealed build an app runs from,
 * and removed when the build ends), the variables that point npm, pip and Node.js at them, and the proxy
 * variables. None of it is in an app's environment or files at run time. A registry or proxy on the
 * host's loopback (a sandbox's own 127.0.0.1 is not the host's) is reached through a forward to that one
 * address (src/dataplane/host-forwards.ts), opened for the build and closed after it: nothing else of
 * the host's loopback becomes reachable.
 *
 * The build log says which registries a build uses, never a credential: passwords in URLs are replaced,
 * and an npmrc's tokens are named only by the registry they are for. What cannot be promised: the build's
 * own commands can read the settings they install with (npm sends the token), so a build that copies
 * them into its output hands them to its app.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { RegistrySettings } from '../config-registries.ts';
import { isLoopbackHost, openHostForward, type HostForward } from './host-forwards.ts';
import type { Sandbox } from './sandbox.ts';
import { removeTree } from './build-snapshot.ts';

/** Where a bubblewrap sandbox shows the build's registry directory (/home is the sandbox's own tmpfs). */
const SANDBOX_REGISTRY_DIR = '/home/.registry';
/** Connections a build may hold to one forwarded registry or proxy at once (npm opens up to 15 by default). */
const REGISTRY_FORWARD_CONNECTIONS = 64;
const NPM_DEFAULT_REGISTRY = 'https://registry.npmjs.org/';
const PIP_DEFAULT_INDEX = 'https://pypi.org/simple';

/** A registry setting that cannot be used: the build fails with this message. */
export class RegistrySettingsError extends Error {
  readonly reason = 'registry_settings_unreadable';
  constructor(message: string) {
    super(message);
    this.name = 'RegistrySettingsError';
  }
}

export interface BuildRegistries {
  /** Variables the build's commands get. */
  env: Record<string, string>;
  /** Host directories the sandbox shows read-only. */
  readOnly: { source: string; target: string }[];
  /** Forwards to registries and proxies on the host's loopback. */
  forwards: HostForward[];
  /** Lines for the build log: which registries, CA bundle and proxies (no credentials). */
  described: string[];
  /** Closes the forwards and removes the copies. */
  close(): Promise<void>;
}

/**
 * The `key=value` settings of an npmrc, the last of each key winning as in npm's own reader (`ini`);
 * comments (`;`, `#`) and sections ignored, quotes around a value removed.
 */
export function npmrcSettings(text: string): Map<string, string> {
  const settings = new Map<string, string>();
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith(';') || line.startsWith('#') || line.startsWith('[')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const value = line.slice(eq + 1).trim();
    settings.set(line.slice(0, eq).trim(), value.replace(/^(["'])(.*)\1$/, '$2'));
  }
  return settings;
}

export interface PipIndexes {
  indexUrl: string | null;
  extraIndexUrls: string[];
  findLinks: string[];
  trustedHosts: string[];
}

/**
 * The index settings of a pip configuration file (Python's configparser format, as pip reads it):
 * `[global]`, then `[install]` over it; a value may go on over indented lines, each a separate entry.
 */
export function pipIndexes(text: string): PipIndexes {
  const sections = new Map<string, Map<string, string[]>>();
  let section: Map<string, string[]> | null = null;
  let key: string | null = null;
  for (const raw of text.split(/\r?\n/)) {
    if (/^\s*([#;]|$)/.test(raw)) continue;
    const header = /^\[([^\]]+)\]\s*$/.exec(raw);
    if (header) {
      section = sections.get(header[1]!.trim()) ?? new Map<string, string[]>();
      sections.set(header[1]!.trim(), section);
      key = null;
    } else if (/^\s/.test(raw) && section && key) section.get(key)!.push(...raw.trim().split(/\s+/));
    else if (section) {
      const match = /^([^=:]+)[=:](.*)$/.exec(raw);
      if (!match) continue;
      key = match[1]!.trim().toLowerCase().replaceAll('_', '-');
      section.set(key, match[2]!.trim().split(/\s+/).filter(Boolean));
    }
  }
  const value = (name: string): string[] =>
    sections.get('install')?.get(name) ?? sections.get('global')?.get(name) ?? [];
  return {
    indexUrl: value('index-url')[0] ?? null,
    extraIndexUrls: value('extra-index-url'),
    findLinks: value('find-links'),
    trustedHosts: value('trusted-host'),
  };
}

/** A URL as the log may show it: a user name and password replaced. */
function shownUrl(raw: string): string {
  if (!URL.canParse(raw)) return raw.includes('@') ? '(a URL that cannot be parsed)' : raw;
  const url = new URL(raw);
  if (url.username || url.password) {
    url.username = '***';
    url.password = '';
  }
  return url.toString();
}

async function readSetting(file: string | null, explicit: boolean, what: string): Promise<string | null> {
  if (file === null) return null;
  try {
    return await fs.readFile(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // A default that is not there is no setting; a file the operator named must be there.
    if (!explicit && code === 'ENOENT') return null;
    throw new RegistrySettingsError(`The ${what} ${file} could not be read (${code ?? String(error)}).`);
  }
}

/** The loopback host and port of an http(s) URL, or null when it names no loopback address. */
function loopbackTarget(raw: string): { host: string; port: number } | null {
  if (!URL.canParse(raw)) return null;
  const url = new URL(raw);
  if (!isLoopbackHost(url.hostname) || (url.protocol !== 'http:' && url.protocol !== 'https:')) return null;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return {
    host: host === 'localhost' ? '127.0.0.1' : host,
    port: Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
  };
}

/**
 * Prepares the operator's registry settings for one build in `dir` (made here, the build's user's);
 * `close` when the build has ended.
 */
export async function prepareBuildRegistries(
  settings: RegistrySettings,
  sandbox: Sandbox,
  dir: string,
  hooks: {
    /** Gives the build's user the directory (its files are readable by that user only). */
    own(dir: string): Promise<void>;
    /** Says something in the build log. */
    warn(message: string): void;
  },
): Promise<BuildRegistries> {
  const npmrcText = await readSetting(
    settings.npmrc,
    settings.explicit.npmrc,
    'npm configuration (SLIPWAY_BUILD_NPMRC)',
  );
  const pipText = await readSetting(
    settings.pipConf,
    settings.explicit.pipConf,
    'pip configuration (SLIPWAY_BUILD_PIP_CONF)',
  );
  const ca =
    settings.caFile === null ? null : await readSetting(settings.caFile, true, 'CA bundle (SLIPWAY_BUILD_CA_FILE)');
  const inside = sandbox.kind === 'bwrap' ? SANDBOX_REGISTRY_DIR : dir;
  // Given to the build's uid (hooks.own): a subordinate one is removed in the namespace that maps it.
  await removeTree(dir, sandbox.ids);
  await fs.mkdir(dir, { mode: 0o700 });
  const env: Record<string, string> = {};
  const described: string[] = [];
  const write = async (name: string, content: string) =>
    fs.writeFile(path.join(dir, name), content, { mode: 0o600, flag: 'wx' });

  // npm: the operator's npmrc, then what the service's own settings put over it.
  const npm = npmrcText === null ? new Map<string, string>() : npmrcSettings(npmrcText);
  const npmOver = [
    ...(settings.npmRegistry ? [`registry=${settings.npmRegistry}`] : []),
    ...(ca !== null ? [`cafile=${inside}/ca.pem`] : []),
  ];
  if (npmrcText !== null || npmOver.length > 0) {
    await write('npmrc', `${npmrcText ?? ''}\n${npmOver.join('\n')}\n`);
    env.npm_config_userconfig = `${inside}/npmrc`;
  }
  const npmRegistry = settings.npmRegistry ?? npm.get('registry') ?? NPM_DEFAULT_REGISTRY;
  const scoped = [...npm].filter(([key]) => /^@[^:]+:registry$/.test(key));
  const credentials = [...npm.keys()].filter((key) => /^\/\/.*:(_authToken|_auth|_password|username)$/.test(key));
  const from = settings.npmrc && npmrcText !== null ? ` (settings from ${settings.npmrc})` : '';
  described.push(
    `npm registry: ${shownUrl(npmRegistry)}` +
      scoped.map(([key, url]) => `; ${key.split(':')[0]}: ${shownUrl(url)}`).join('') +
      (credentials.length
        ? `; credentials for ${[...new Set(credentials.map((k) => k.slice(0, k.lastIndexOf(':'))))].join(', ')} (not shown)`
        : '') +
      from,
  );

  // pip: the operator's file as pip's configuration, the service's index over it (pip's variables win).
  const pip = pipText === null ? pipIndexes('') : pipIndexes(pipText);
  if (pipText !== null) {
    await write('pip.conf', pipText);
    env.PIP_CONFIG_FILE = `${inside}/pip.conf`;
  }
  if (settings.pipIndexUrl) env.PIP_INDEX_URL = settings.pipIndexUrl;
  const pipIndex = settings.pipIndexUrl ?? pip.indexUrl ?? PIP_DEFAULT_INDEX;
  described.push(
    `pip index: ${shownUrl(pipIndex)}` +
      (pip.extraIndexUrls.length ? `; extra indexes: ${pip.extraIndexUrls.map(shownUrl).join(', ')}` : '') +
      (pip.findLinks.length ? `; find-links: ${pip.findLinks.map(shownUrl).join(', ')}` : '') +
      (pip.trustedHosts.length ? `; trusted hosts: ${pip.trustedHosts.join(', ')}` : '') +
      (settings.pipConf && pipText !== null ? ` (settings from ${settings.pipConf})` : ''),
  );

  if (ca !== null) {
    await write('ca.pem', ca);
    // npm's cafile (above) and pip's cert replace their default authorities: the bundle must be whole.
    Object.assign(env, {
      PIP_CERT: `${inside}/ca.pem`,
      NODE_EXTRA_CA_CERTS: `${inside}/ca.pem`,
      SSL_CERT_FILE: `${inside}/ca.pem`,
      REQUESTS_CA_BUNDLE: `${inside}/ca.pem`,
    });
    described.push(`CA bundle: ${settings.caFile}`);
  }
  const proxies: [string, string | null][] = [
    ['HTTP_PROXY', settings.httpProxy],
    ['HTTPS_PROXY', settings.httpsProxy],
  ];
  for (const [name, value] of proxies) {
    if (value === null) continue;
    env[name] = value;
    env[name.toLowerCase()] = value;
  }
  if (settings.noProxy !== null) {
    env.NO_PROXY = settings.noProxy;
    env.no_proxy = settings.noProxy;
  }
  if (settings.httpProxy || settings.httpsProxy)
    described.push(
      `proxy: ${[settings.httpProxy && `http ${shownUrl(settings.httpProxy)}`, settings.httpsProxy && `https ${shownUrl(settings.httpsProxy)}`].filter(Boolean).join(', ')}` +
        (settings.noProxy ? ` (not for ${settings.noProxy})` : ''),
    );
  await hooks.own(dir);

  // What is on the host's loopback is reached through a forward each, when the build has a network of its own.
  const forwards: HostForward[] = [];
  let socketDir: string | null = null;
  const close = async () => {
    await Promise.all(forwards.map((f) => f.close()));
    if (socketDir) await fs.rm(socketDir, { recursive: true, force: true });
    await removeTree(dir, sandbox.ids);
  };
  try {
    const urls = [
      npmRegistry,
      ...scoped.map(([, url]) => url),
      pipIndex,
      ...pip.extraIndexUrls,
      ...pip.findLinks,
      ...[settings.httpProxy, settings.httpsProxy].filter((u): u is string => u !== null),
    ];
    const targets = new Map<string, { host: string; port: number }>();
    for (const url of urls) {
      const target = loopbackTarget(url);
      if (target) targets.set(`${target.host}:${target.port}`, target);
    }
    if (targets.size > 0 && sandbox.slirp) {
      socketDir = path.join(sandbox.slirp.socketDir, randomBytes(12).toString('hex'));
      await fs.mkdir(socketDir, { mode: 0o711 });
      const logger = { warn: (_: unknown, message: string) => hooks.warn(message) } as unknown as Pick<Logger, 'warn'>;
      for (const target of targets.values()) {
        forwards.push(
          await openHostForward(
            socketDir,
            {
              name: `registry-${target.port}`,
              host: target.host,
              port: target.port,
              insidePort: target.port,
              maxConnections: REGISTRY_FORWARD_CONNECTIONS,
            },
            logger,
          ),
        );
      }
      described.push(
        `on this machine, reached through a forward each: ${[...targets.keys()].join(', ')} (at the same address inside the build)`,
      );
    }
  } catch (error) {
    await close();
    throw error;
  }
  const readOnly = sandbox.kind === 'bwrap' ? [{ source: dir, target: SANDBOX_REGISTRY_DIR }] : [];
  return { env, readOnly, forwards, described, close };
}
