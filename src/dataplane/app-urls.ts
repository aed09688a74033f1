/**
 * Where a deployment's app is reached. Every app has a slug that is a DNS label, and two stable URLs on
 * the service's own port: host-based (`http://<slug>.<appsDomain>:<port>`) for apps that assume they
 * own the root path, and path-based (`<publicUrl>/apps/<slug>/`) for when no wildcard DNS is at hand.
 * Pure functions: the router and the API views both derive URLs and slugs from here.
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

export interface AppUrls {
  slug: string;
  /** `http(s)://<slug>.<appsDomain>[:port]`: the app at the root of its own host. */
  hostUrl: string;
  /** `<publicUrl>/apps/<slug>/`: the app under a path prefix of the service's own address. */
  pathUrl: string;
}

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

/** Both URLs of a deployment, built from the service's public URL (scheme and port) and the apps domain. */
export function appUrls(
  deployment: { name: string; id: string },
  options: { publicUrl: string; appsDomain: string },
): AppUrls {
  const slug = appSlug(deployment);
  const base = new URL(options.publicUrl);
  // URL.port is '' for the scheme's default port, which is exactly when the URL should not name one.
  const port = base.port === '' ? '' : `:${base.port}`;
  return {
    slug,
    hostUrl: `${base.protocol}//${slug}.${options.appsDomain}${port}`,
    pathUrl: `${options.publicUrl.replace(/\/+$/, '')}/apps/${slug}/`,
  };
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

/**
 * The slug of a path-based request and what follows it: `/apps/<slug>/x?y` gives `{ slug, rest: '/x?y' }`.
 * `rest` is '' (or just the query) for `/apps/<slug>` without the trailing slash, which the router
 * redirects. Null for any other path, which is the API's.
 */
export function slugFromPath(url: string | undefined): { slug: string; rest: string } | null {
  const match = url === undefined ? null : /^\/apps\/([^/?#]+)(.*)$/s.exec(url);
  if (match === null || !isAppSlug(match[1]!)) return null;
  return { slug: match[1]!, rest: match[2]! };
}
