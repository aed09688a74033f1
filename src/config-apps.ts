/**
 * The settings of the apps the local data plane runs, in src/config.ts: where the app edge listens and
 * under which domain and URL users reach apps, its TLS, which proxy and which sandbox serve them.
 */
import path from 'node:path';
import { choice, ConfigError, httpUrl, integer, text, type Env } from './config-values.ts';

export function appsDomain(env: Env): string {
  const raw = text(env, 'SLIPWAY_APPS_DOMAIN');
  if (raw === null) return 'localhost';
  const domain = raw.toLowerCase().replace(/\.$/, '');
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(domain)) {
    throw new ConfigError('SLIPWAY_APPS_DOMAIN', `must be a DNS domain such as apps.example.com, got '${raw}'`);
  }
  return domain;
}

export function appsPort(env: Env, port: number): number {
  const chosen = integer(env, 'SLIPWAY_APPS_PORT', port === 0 ? 0 : port < 65535 ? port + 1 : port - 1, 0, 65535);
  if (chosen !== 0 && chosen === port)
    throw new ConfigError('SLIPWAY_APPS_PORT', `must differ from PORT (${port}): apps never share the API's origin`);
  return chosen;
}

export function appsPublicUrl(env: Env, domain: string): string | null {
  const name = 'SLIPWAY_APPS_PUBLIC_URL';
  const given = httpUrl(env, name, `https://${domain}`);
  if (given === null) return null;
  const { url } = given;
  if (url.hostname !== domain)
    throw new ConfigError(
      name,
      `its host must be the apps domain (SLIPWAY_APPS_DOMAIN=${domain}), got '${url.hostname}'`,
    );
  if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '' || url.username !== '')
    throw new ConfigError(name, 'must be a scheme, host and optional port only (apps are at the root of their host)');
  return url.origin;
}

export function appsTls(env: Env, cwd: string): { readonly certFile: string; readonly keyFile: string } | null {
  const cert = text(env, 'SLIPWAY_APPS_TLS_CERT');
  const key = text(env, 'SLIPWAY_APPS_TLS_KEY');
  if (cert === null && key === null) return null;
  if (cert === null) throw new ConfigError('SLIPWAY_APPS_TLS_CERT', 'is required with SLIPWAY_APPS_TLS_KEY');
  if (key === null) throw new ConfigError('SLIPWAY_APPS_TLS_KEY', 'is required with SLIPWAY_APPS_TLS_CERT');
  return { certFile: path.resolve(cwd, cert), keyFile: path.resolve(cwd, key) };
}

const EDGE_PROXY_MODES = ['auto', 'haproxy', 'builtin'] as const;
const SANDBOX_MODES = ['auto', 'bwrap', 'none'] as const;
export type SandboxMode = (typeof SANDBOX_MODES)[number];
export type EdgeProxyMode = (typeof EDGE_PROXY_MODES)[number];

export function edgeProxy(env: Env): EdgeProxyMode {
  return choice(env, 'SLIPWAY_EDGE_PROXY', EDGE_PROXY_MODES);
}

export function sandbox(env: Env): SandboxMode {
  return choice(env, 'SLIPWAY_SANDBOX', SANDBOX_MODES);
}

/** The host uids (and gids, the same numbers) deployments get one each of when the service is root. */
export interface AppUidRange {
  readonly first: number;
  readonly count: number;
}

/**
 * SLIPWAY_APP_UIDS, `FIRST-LAST`: by default 65,536 ids from 1,000,000,000, far above the ranges
 * distributions give users and /etc/subuid entries (100,000 on, in steps of 65,536) and below 2^31
 * (Node.js, and some file systems' tools, take ids as signed 32-bit numbers). No other user or
 * container engine may use them: the start log warns of an overlap with /etc/passwd or /etc/subuid.
 */
export function appUids(env: Env): AppUidRange {
  const raw = text(env, 'SLIPWAY_APP_UIDS') ?? '1000000000-1000065535';
  const match = /^(\d{1,10})-(\d{1,10})$/.exec(raw);
  const first = Number(match?.[1]);
  const last = Number(match?.[2]);
  if (!match || first < 65_536 || last < first || last >= 2 ** 31 - 1)
    throw new ConfigError(
      'SLIPWAY_APP_UIDS',
      `must be a range FIRST-LAST of host uids from 65536 to 2147483646, such as 1000000000-1000065535, got '${raw}'`,
    );
  return { first, count: last - first + 1 };
}
