/**
 * Where `slipway` finds the service and its API key: `--url` / `--tenant` flags, then the environment
 * (SLIPWAY_URL, SLIPWAY_API_KEY, SLIPWAY_TENANT_ID: for CI), then the file `slipway login` writes,
 * `$XDG_CONFIG_HOME/slipway/config.json` (default `~/.config/slipway/config.json`, mode 0600 since it
 * holds a key). This module is the only one of the CLI that reads the environment.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CliError, EXIT } from './cli-errors.ts';

export const DEFAULT_URL = 'http://127.0.0.1:8124';

/** What the CLI reads from its environment, read once at start. */
export interface CliEnvironment {
  url: string | null;
  apiKey: string | null;
  tenantId: string | null;
  configFile: string;
  /** NO_COLOR set to anything non-empty, or TERM=dumb: no colours (https://no-color.org). */
  noColor: boolean;
  debug: boolean;
}

export function readEnvironment(env: NodeJS.ProcessEnv = process.env): CliEnvironment {
  const value = (name: string) => (env[name] !== undefined && env[name] !== '' ? env[name] : null);
  const configHome = value('XDG_CONFIG_HOME') ?? path.join(os.homedir(), '.config');
  return {
    url: value('SLIPWAY_URL'),
    apiKey: value('SLIPWAY_API_KEY'),
    tenantId: value('SLIPWAY_TENANT_ID'),
    configFile: path.join(configHome, 'slipway', 'config.json'),
    noColor: value('NO_COLOR') !== null || env.TERM === 'dumb',
    debug: value('SLIPWAY_DEBUG') !== null && env.SLIPWAY_DEBUG !== '0',
  };
}

/** The saved login. */
export interface StoredConfig {
  url: string;
  api_key: string;
  tenant_id?: string | null;
}

export async function readStoredConfig(file: string): Promise<StoredConfig | null> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new CliError(`cannot read ${file}: ${(error as Error).message}`, EXIT.usage);
  }
  try {
    const parsed: unknown = JSON.parse(text);
    if (
      typeof parsed === 'object' &&
      parsed !== null &&
      typeof (parsed as StoredConfig).url === 'string' &&
      typeof (parsed as StoredConfig).api_key === 'string'
    )
      return parsed as StoredConfig;
  } catch {
    // Reported below with the fix.
  }
  throw new CliError(`${file} is not a valid slipway config file`, EXIT.usage, [
    'Run `slipway login` again to rewrite it.',
  ]);
}

/** Writes the login readable by its owner only: the directory 0700, the file 0600 (also when it existed with wider modes). */
export async function writeStoredConfig(file: string, config: StoredConfig): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const temporary = `${file}.${process.pid}.tmp`;
  await fs.writeFile(temporary, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  await fs.chmod(temporary, 0o600);
  // A rename, so a reader never sees half a file.
  await fs.rename(temporary, file);
}

export async function removeStoredConfig(file: string): Promise<boolean> {
  try {
    await fs.rm(file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}

export interface Connection {
  url: string;
  apiKey: string | null;
  tenantId: string | null;
  /** Where the key came from, for messages. */
  keySource: 'environment' | 'config file' | null;
}

/** Flags win over the environment, which wins over the saved login. */
export async function resolveConnection(
  environment: CliEnvironment,
  flags: { url?: string; tenant?: string },
): Promise<Connection> {
  const stored = await readStoredConfig(environment.configFile);
  const apiKey = environment.apiKey ?? stored?.api_key ?? null;
  return {
    url: (flags.url ?? environment.url ?? stored?.url ?? DEFAULT_URL).replace(/\/+$/, ''),
    apiKey,
    tenantId: flags.tenant ?? environment.tenantId ?? stored?.tenant_id ?? null,
    keySource: environment.apiKey ? 'environment' : stored ? 'config file' : null,
  };
}
