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

/** A cookie of the request; null when absent, empty or implausibly long. */
export function readCookie(request: FastifyRequest, name: string): string | null {
  const header = request.headers.cookie;
  if (typeof header !== 'string' || header.length > 16_384) return null;
  const value = parseCookie(header)[name];
  return value === undefined || value === '' || value.length > 256 ? null : value;
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
