/**
 * The stream budgets of src/config.ts (docs/api.md, "Streams and long-polls"; docs/operations.md, "Stream
 * budgets"): how many followed logs, long-polls and OAuth waits each tenant may hold open, and which
 * proxies' X-Forwarded-For names the client.
 */
import net from 'node:net';
import { ConfigError, integer, text, type Env } from './config-values.ts';

export interface StreamBudgets {
  /** Per API key or listener credential. */
  readonly perKey: number;
  /** Per workspace, all its keys and listener credentials together. */
  readonly perWorkspace: number;
  /** Per deployment, for what its app asks through its own way to the API (whatever key it uses). */
  readonly perDeployment: number;
  /** Per client address, for callers without a credential. */
  readonly perAddress: number;
}

export function streamBudgets(env: Env): StreamBudgets {
  return Object.freeze({
    perKey: integer(env, 'SLIPWAY_STREAMS_PER_KEY', 20, 1, 100_000),
    // A fleet of a thousand listeners (one long-poll each) and its people's log follows.
    perWorkspace: integer(env, 'SLIPWAY_STREAMS_PER_WORKSPACE', 1_200, 1, 1_000_000),
    perDeployment: integer(env, 'SLIPWAY_STREAMS_PER_DEPLOYMENT', 20, 1, 100_000),
    perAddress: integer(env, 'SLIPWAY_STREAMS_PER_ADDRESS', 100, 1, 100_000),
  });
}

/**
 * SLIPWAY_TRUSTED_PROXIES: addresses or CIDR ranges (`10.0.0.5`, `10.0.0.0/8`, `::1`) of the reverse
 * proxies whose X-Forwarded-For the service believes; empty (the default) believes none.
 */
export function trustedProxies(env: Env): readonly string[] {
  const raw = text(env, 'SLIPWAY_TRUSTED_PROXIES');
  if (raw === null) return Object.freeze([]);
  const entries = raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  for (const entry of entries) {
    const [address, prefix, ...rest] = entry.split('/');
    const family = net.isIP(address ?? '');
    const bits = family === 6 ? 128 : 32;
    const prefixOk = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= bits);
    if (family === 0 || !prefixOk || rest.length > 0)
      throw new ConfigError(
        'SLIPWAY_TRUSTED_PROXIES',
        `must be IP addresses or CIDR ranges separated by commas (10.0.0.5,10.1.0.0/16), got '${entry}'`,
      );
  }
  return Object.freeze(entries);
}
