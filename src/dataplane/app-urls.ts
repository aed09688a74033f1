import { endpointOfLabel } from '../domain/endpoints.ts';

/**
 * Where a deployment's app is reached: every app has a slug that is a DNS label, unique across the
 * service and kept with its deployment, and its stable URL is
 * `<scheme>://<slug>.<appsDomain>[:<apps port>]` on the app edge (src/dataplane/app-edge.ts), an origin
 * of its own. Pure functions: the built-in edge reads a slug back from a request here.
 */

/** A DNS label is at most 63 characters (RFC 1035). */
const LABEL_MAX = 63;

/**
 * What a slug looks like: a name part (letters, digits, inner dashes) then `-` and 8 hex digits of the
 * deployment's id, or 16 when another deployment held the 8 (the database chooses and keeps each
 * deployment's slug: migrations/017_app_slugs.sql, `deployments.app_slug`). The fixed suffix keeps
 * ordinary host names (`api.example.com` when the apps domain is `example.com`) and API paths from being
 * mistaken for apps.
 */
const SLUG = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?-(?:[0-9a-f]{8}|[0-9a-f]{16})$/;

export function isAppSlug(value: string): boolean {
  return value.length <= LABEL_MAX && SLUG.test(value);
}

/**
 * The route label a Host header names: a deployment's slug for `<slug>.<appsDomain>`, or an endpoint's
 * `<slug>--<endpoint>` (src/domain/endpoints.ts says why the two never collide); null when the host is
 * neither (the service's own host, an IP address, another domain, a deeper subdomain). Host names are
 * case-insensitive and may carry a port and a trailing dot.
 */
export function slugFromHost(hostHeader: string | undefined, appsDomain: string): string | null {
  if (hostHeader === undefined || hostHeader.startsWith('[')) return null;
  const host = hostHeader.replace(/:\d*$/, '').replace(/\.$/, '').toLowerCase();
  const suffix = `.${appsDomain.toLowerCase().replace(/\.$/, '')}`;
  if (!host.endsWith(suffix)) return null;
  const label = host.slice(0, -suffix.length);
  return isAppSlug(label) || endpointOfLabel(label, isAppSlug) !== null ? label : null;
}
