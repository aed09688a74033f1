/**
 * The package registries builds install from (docs/operations.md, "Package registries"): the operator's
 * npm and pip settings, a CA bundle and proxies, set once here, passed into every sandboxed build by
 * src/dataplane/build-registries.ts. By default the service user's own `~/.npmrc` and pip configuration
 * and the service's own proxy variables, the settings its user's `npm install` and `pip install` use.
 */
import path from 'node:path';
import { ConfigError, httpUrl, text, type Env } from './config-values.ts';

export interface RegistrySettings {
  /** An npmrc file whose settings (registry, scoped registries, auth) builds use; null: none. */
  readonly npmrc: string | null;
  /** A pip configuration file builds use; null: none. */
  readonly pipConf: string | null;
  /** Whether the files were named by the operator (missing: the build fails) or found by default. */
  readonly explicit: { readonly npmrc: boolean; readonly pipConf: boolean };
  /** npm's default registry, over the npmrc's `registry`. */
  readonly npmRegistry: string | null;
  /** pip's index, over the configuration file's `index-url`. */
  readonly pipIndexUrl: string | null;
  /** A PEM bundle of the certificate authorities builds trust (npm's cafile, pip's cert, Node's). */
  readonly caFile: string | null;
  readonly httpProxy: string | null;
  readonly httpsProxy: string | null;
  readonly noProxy: string | null;
}

/** A file setting: `none` switches it off; unset, the first of the defaults (checked at build time). */
function fileSetting(
  env: Env,
  name: string,
  cwd: string,
  defaults: string[],
): { file: string | null; explicit: boolean } {
  const raw = text(env, name);
  if (raw === 'none') return { file: null, explicit: true };
  if (raw !== null) return { file: path.resolve(cwd, raw), explicit: true };
  return { file: defaults[0] ?? null, explicit: false };
}

/** A proxy URL, never quoted back in an error: it may hold a password. */
function proxy(env: Env, name: string, standard: string): string | null {
  const own = text(env, name);
  const raw = own ?? text(env, standard) ?? text(env, standard.toLowerCase());
  if (raw === null) return null;
  const url = URL.canParse(raw) ? new URL(raw) : null;
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new ConfigError(own === null ? standard : name, 'must be a proxy URL such as http://proxy.example:3128');
  return url.toString();
}

export function registrySettings(env: Env, cwd: string): RegistrySettings {
  const home = text(env, 'HOME');
  const npmrc = fileSetting(env, 'SLIPWAY_BUILD_NPMRC', cwd, home ? [path.join(home, '.npmrc')] : []);
  // pip's per-user file (XDG), where pip looks first on Linux.
  const xdg = text(env, 'XDG_CONFIG_HOME') ?? (home ? path.join(home, '.config') : null);
  const pipConf = fileSetting(env, 'SLIPWAY_BUILD_PIP_CONF', cwd, xdg ? [path.join(xdg, 'pip', 'pip.conf')] : []);
  const ca = text(env, 'SLIPWAY_BUILD_CA_FILE');
  return Object.freeze({
    npmrc: npmrc.file,
    pipConf: pipConf.file,
    explicit: Object.freeze({ npmrc: npmrc.explicit, pipConf: pipConf.explicit }),
    npmRegistry: httpUrl(env, 'SLIPWAY_BUILD_NPM_REGISTRY', 'https://npm.example.com/')?.url.toString() ?? null,
    pipIndexUrl:
      httpUrl(env, 'SLIPWAY_BUILD_PIP_INDEX_URL', 'https://pypi.example.com/simple/')?.url.toString() ?? null,
    caFile: ca === null ? null : path.resolve(cwd, ca),
    httpProxy: proxy(env, 'SLIPWAY_BUILD_HTTP_PROXY', 'HTTP_PROXY'),
    httpsProxy: proxy(env, 'SLIPWAY_BUILD_HTTPS_PROXY', 'HTTPS_PROXY'),
    noProxy: text(env, 'SLIPWAY_BUILD_NO_PROXY') ?? text(env, 'NO_PROXY') ?? text(env, 'no_proxy'),
  });
}
