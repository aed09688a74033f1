/**
 * Endpoints of a deployment (docs/app-urls.md, "Endpoints"): named addresses, each pinned to a revision,
 * served at `<slug>--<name>.<apps domain>`. Pure rules: what a name may be, and the host label it makes.
 *
 * Why `--` and why the rules below: a deployment's slug is `<name part>-<8 or 16 hex digits>`
 * (src/dataplane/app-urls.ts) and its name part may itself hold `--`, so `<slug>--<endpoint>` must never
 * read as another deployment's slug. It cannot when the endpoint's name
 * - holds no `--` (so the label splits at its last `--` one way only), and
 * - does not end in `-` and 8 or 16 hex digits (then the whole label does not look like a slug: a slug
 *   ends in such a suffix after a letter or digit, and an endpoint label ends in the endpoint's name,
 *   after `--` when the name is only hex digits).
 * Slugs are checked against the slug pattern, endpoint labels against the two rules, so a host names at
 * most one of them, and no endpoint can take a host that a deployment has or may get.
 */

/** A DNS label is at most 63 characters (RFC 1035). */
export const LABEL_MAX = 63;

/** Endpoints a deployment may have: each runs instances of its own. */
export const MAX_ENDPOINTS_PER_DEPLOYMENT = 10;

/** The form the API's schema takes: letters, digits, inner dashes. */
export const ENDPOINT_NAME_PATTERN = '^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$';

const NAME = new RegExp(ENDPOINT_NAME_PATTERN);
const SLUG_LIKE_END = /-(?:[0-9a-f]{8}|[0-9a-f]{16})$/;

/** Why `name` cannot be an endpoint of the deployment whose slug is `slug`; null when it can. */
export function endpointNameProblem(name: string, slug: string): string | null {
  if (!NAME.test(name))
    return 'an endpoint name is lowercase letters, digits and dashes, starting and ending with a letter or digit';
  if (name.includes('--'))
    return "an endpoint name may not hold '--' (it separates the slug from the endpoint in the host name)";
  if (SLUG_LIKE_END.test(name))
    return "an endpoint name may not end in '-' and 8 or 16 hex digits (its host name would look like another deployment's)";
  const label = endpointLabel(slug, name);
  if (label.length > LABEL_MAX)
    return `'${label}' would be longer than a host name label may be (${LABEL_MAX} characters); use a name of at most ${LABEL_MAX - slug.length - 2} characters`;
  return null;
}

/**
 * Whether `name` is kept for a pull request's preview (`pr-<number>`, docs/codehost.md): only the
 * pull request's webhooks make and move such an endpoint, never a user by hand.
 */
export function isPreviewEndpointName(name: string): boolean {
  return /^pr-[0-9]+$/.test(name);
}

/** The host label of an endpoint: `<slug>--<name>`. */
export function endpointLabel(slug: string, name: string): string {
  return `${slug}--${name}`;
}

/** The endpoint named by a host label, or null when the label is no endpoint's (a slug, say). */
export function endpointOfLabel(
  label: string,
  isSlug: (value: string) => boolean,
): { slug: string; name: string } | null {
  const at = label.lastIndexOf('--');
  if (at <= 0) return null;
  const slug = label.slice(0, at);
  const name = label.slice(at + 2);
  if (!isSlug(slug) || !NAME.test(name) || SLUG_LIKE_END.test(name) || label.length > LABEL_MAX) return null;
  return { slug, name };
}
