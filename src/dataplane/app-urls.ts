/**
 * Where a deployment's app is reached: every app has a slug that is a DNS label, and its stable URL is
 * `<scheme>://<slug>.<appsDomain>[:<apps port>]` on the app edge (src/dataplane/app-edge.ts), an origin
 * of its own. Pure functions: the edges and the data plane derive slugs from here.
 */

/** A DNS label is at most 63 characters (RFC 1035). */
const LABEL_MAX = 63;
const ID_PART = 8;
/** Room left for the name: the label minus `-` and the id part. */
const NAME_MAX = LABEL_MAX - 1 - ID_PART;

/**
 * What a slug looks like: a name part (letters, digits, inner dashes) then `-` and 8 hex digits. The
 * fixed suffix keeps ordinary host names (`api.example.com` when the apps domain is `example.com`) and
 * API paths from being mistaken for apps.
 */
const SLUG = new RegExp(`^[a-z0-9](?:[a-z0-9-]{0,${NAME_MAX - 2}}[a-z0-9])?-[0-9a-f]{${ID_PART}}$`);

function isAppSlug(value: string): boolean {
  return SLUG.test(value);
}

/**
 * `<name>-<first 8 hex digits of the id>`: names are unique per workspace only, the id part keeps two
 * workspaces' `support-agent` apart. Names are already DNS labels (the API's pattern); anything else is
 * folded into one defensively, and the name is cut so the whole slug stays a label.
 */
export function appSlug(deployment: { name: string; id: string }): string {
  const hex = deployment.id.toLowerCase().replace(/-/g, '');
  if (!/^[0-9a-f]{8}/.test(hex)) throw new Error(`deployment id '${deployment.id}' does not start with 8 hex digits`);
  const name =
    deployment.name
      .toLowerCase()
      .replace(/[^a-z0-9-]+/g, '-')
      .slice(0, NAME_MAX)
      .replace(/^-+|-+$/g, '') || 'app';
  return `${name}-${hex.slice(0, ID_PART)}`;
}

/**
 * The slug a Host header names, or null when the host is not `<slug>.<appsDomain>` (the service's own
 * host, an IP address, another domain, a deeper subdomain). Host names are case-insensitive and may
 * carry a port and a trailing dot.
 */
export function slugFromHost(hostHeader: string | undefined, appsDomain: string): string | null {
  if (hostHeader === undefined || hostHeader.startsWith('[')) return null;
  const host = hostHeader.replace(/:\d*$/, '').replace(/\.$/, '').toLowerCase();
  const suffix = `.${appsDomain.toLowerCase().replace(/\.$/, '')}`;
  if (!host.endsWith(suffix)) return null;
  const label = host.slice(0, -suffix.length);
  return isAppSlug(label) ? label : null;
}
