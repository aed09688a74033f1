/**
 * How src/config.ts reads one setting: the value readers every area of the configuration shares, each
 * failing with a ConfigError that names the variable. They read the `env` they are given, never
 * process.env (src/config.ts is the only module that does).
 */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

export type Env = Readonly<Record<string, string | undefined>>;

export function text(env: Env, name: string): string | null {
  const value = env[name];
  return value === undefined || value.trim() === '' ? null : value.trim();
}

export function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === null) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be an integer, got '${raw}'`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

export function decimal(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === null) return fallback;
  if (!/^\d+(\.\d+)?$/.test(raw)) throw new ConfigError(name, `must be a number such as 0.5 or 2, got '${raw}'`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

/** One of `values` in any letter case; the first is the default. */
export function choice<T extends string>(env: Env, name: string, values: readonly [T, ...T[]]): T {
  const raw = text(env, name);
  if (raw === null) return values[0];
  const value = raw.toLowerCase();
  if (!(values as readonly string[]).includes(value))
    throw new ConfigError(name, `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}, got '${raw}'`);
  return value as T;
}

export function flag(env: Env, name: string): boolean {
  const raw = text(env, name);
  if (raw === null) return false;
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  throw new ConfigError(name, `must be 1 or 0 (true or false), got '${raw}'`);
}

/** An http(s) URL setting, parsed; null when unset. */
export function httpUrl(env: Env, name: string, example: string): { raw: string; url: URL } | null {
  const raw = text(env, name);
  if (raw === null) return null;
  let url: URL | null = null;
  try {
    url = new URL(raw);
  } catch {
    // Said below.
  }
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new ConfigError(name, `must be an http(s) URL such as ${example}, got '${raw}'`);
  return { raw, url };
}
