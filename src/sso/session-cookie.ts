/**
 * The cookies of single sign-on: the session (a random token) and, during a sign-in, its state. Both
 * HttpOnly and SameSite=Lax (Lax, not Strict: the provider's redirect back is a cross-site navigation
 * that must carry the state cookie), host-only (no Domain: never sent to the apps' host names) and,
 * when the public URL is https, Secure with the `__Host-` prefix, which also stops a page on a sibling
 * host name (an app) from planting a cookie of that name for the service.
 */
import { parseCookie, stringifySetCookie } from 'cookie';
import type { FastifyRequest } from 'fastify';

export interface CookieNames {
  session: string;
  state: string;
  secure: boolean;
}

/** The names for a public URL; an operator's edge in front of apps strips both forms. */
export function cookieNames(publicUrl: string): CookieNames {
  const secure = new URL(publicUrl).protocol === 'https:';
  const prefix = secure ? '__Host-' : '';
  return { session: `${prefix}slipway_session`, state: `${prefix}slipway_sso_state`, secure };
}

/**
 * A cookie of the request; null when absent, empty or longer than `maxLength` (256: a token; the state
 * cookie, a sealed sign-in, is longer).
 */
export function readCookie(request: FastifyRequest, name: string, maxLength = 256): string | null {
  const header = request.headers.cookie;
  if (typeof header !== 'string' || header.length > 16_384) return null;
  const value = parseCookie(header)[name];
  return value === undefined || value === '' || value.length > maxLength ? null : value;
}

/** A Set-Cookie value; `maxAgeSeconds` 0 removes the cookie. */
export function setCookie(names: CookieNames, name: string, value: string, maxAgeSeconds: number): string {
  return stringifySetCookie({
    name,
    value,
    path: '/',
    httpOnly: true,
    secure: names.secure,
    sameSite: 'lax',
    maxAge: maxAgeSeconds,
    ...(maxAgeSeconds === 0 ? { expires: new Date(0) } : {}),
  });
}

/**
 * The session cookie as an OpenAPI security scheme (src/app.ts): every operation that takes an API key
 * takes it too (src/http/authenticate.ts), named as this service names it.
 */
export function sessionCookieScheme(publicUrl: string): {
  type: 'apiKey';
  in: 'cookie';
  name: string;
  description: string;
} {
  const names = cookieNames(publicUrl);
  return {
    type: 'apiKey',
    in: 'cookie',
    name: names.session,
    description:
      "The dashboard's single sign-on session (docs/dashboard.md), set by GET /v2/sso/callback: HttpOnly, named " +
      '`__Host-slipway_session` when the public URL is https, else `slipway_session`. It acts like an API key with ' +
      "the role the person's mappings give, in the workspace X-Tenant-Id picks. A change made with it (any method " +
      "but GET, HEAD, OPTIONS) must come from the service's own origin (Origin), else 403. A request that carries " +
      'an API key is the key’s, whatever cookie it has.',
  };
}
