/**
 * The single sign-on settings of src/config.ts (docs/operations.md, "Single sign-on"): SLIPWAY_SSO_*.
 */
import { ConfigError, integer, text, type Env } from './config-values.ts';

export interface SsoConfig {
  /** The provider's issuer identifier; its metadata is read from `<issuer>/.well-known/openid-configuration`. */
  readonly issuer: string;
  readonly clientId: string;
  /** Null: a public client (PKCE alone binds the code to the sign-in). */
  readonly clientSecret: string | null;
  /** Always with `openid`. */
  readonly scopes: readonly string[];
  /** The ID token claim that lists the person's groups. */
  readonly groupsClaim: string;
  /** How long a session lasts from sign-in. */
  readonly sessionTtlMs: number;
  /** What the sign-in button calls the provider. */
  readonly providerName: string;
}

/**
 * SLIPWAY_SSO_*: all off without SLIPWAY_SSO_ISSUER. The issuer must be https unless insecure OAuth is
 * allowed for development (the same switch as for OAuth providers).
 */
export function sso(env: Env, allowInsecure: boolean): SsoConfig | null {
  const issuer = text(env, 'SLIPWAY_SSO_ISSUER');
  if (issuer === null) {
    const stray = ['SLIPWAY_SSO_CLIENT_ID', 'SLIPWAY_SSO_CLIENT_SECRET'].find((name) => text(env, name) !== null);
    if (stray !== undefined) throw new ConfigError('SLIPWAY_SSO_ISSUER', `is required with ${stray}`);
    return null;
  }
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new ConfigError('SLIPWAY_SSO_ISSUER', `must be the provider's issuer URL, got '${issuer}'`);
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowInsecure))
    throw new ConfigError(
      'SLIPWAY_SSO_ISSUER',
      'must be an https URL (plain http only with SLIPWAY_ALLOW_INSECURE_OAUTH=1, for development)',
    );
  if (url.search !== '' || url.hash !== '' || url.username !== '')
    throw new ConfigError('SLIPWAY_SSO_ISSUER', 'must have no query, fragment or credentials');
  const clientId = text(env, 'SLIPWAY_SSO_CLIENT_ID');
  if (clientId === null) throw new ConfigError('SLIPWAY_SSO_CLIENT_ID', 'is required with SLIPWAY_SSO_ISSUER');
  const scopes = (text(env, 'SLIPWAY_SSO_SCOPES') ?? 'openid email profile').split(/[\s,]+/).filter((s) => s !== '');
  for (const scope of scopes)
    if (!/^[\x21\x23-\x5b\x5d-\x7e]{1,128}$/.test(scope))
      throw new ConfigError('SLIPWAY_SSO_SCOPES', `'${scope}' is not a valid scope`);
  const groupsClaim = text(env, 'SLIPWAY_SSO_GROUPS_CLAIM') ?? 'groups';
  if (!/^[A-Za-z0-9_:./-]{1,128}$/.test(groupsClaim))
    throw new ConfigError('SLIPWAY_SSO_GROUPS_CLAIM', `must be a claim name such as groups, got '${groupsClaim}'`);
  return {
    issuer,
    clientId,
    clientSecret: text(env, 'SLIPWAY_SSO_CLIENT_SECRET'),
    scopes: [...new Set(['openid', ...scopes])],
    groupsClaim,
    sessionTtlMs: integer(env, 'SLIPWAY_SSO_SESSION_HOURS', 12, 1, 24 * 30) * 3_600_000,
    providerName: (text(env, 'SLIPWAY_SSO_PROVIDER_NAME') ?? 'single sign-on').slice(0, 64),
  };
}
