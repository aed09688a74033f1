/**
 * Repository URLs of GitHub-compatible hosts: `https://github.com/{owner}/{name}` (also with `.git` or a
 * trailing slash, as users paste clone URLs), and the same shape on a GitHub Enterprise Server host.
 */

export interface RepositoryLocation {
  /** Web origin of the host, lowercase, e.g. `https://github.com`. */
  origin: string;
  owner: string;
  name: string;
}

// GitHub's own rules: owners are letters, digits and single hyphens (GHES adds `_` for managed users);
// repository names are letters, digits, `.`, `-` and `_`.
const OWNER = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;
const NAME = /^[A-Za-z0-9._-]{1,100}$/;

/**
 * Parses a repository URL into its host origin, owner and name, or returns null when it is not one.
 * URLs with embedded credentials (`https://token@host/...`) are refused: a repo_url is stored and shown,
 * and must never carry a secret.
 */
export function parseRepositoryUrl(url: string): RepositoryLocation | null {
  let parsed: URL;
  try {
    parsed = new URL(url.trim());
  } catch {
    return null;
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return null;
  if (parsed.username !== '' || parsed.password !== '' || parsed.search !== '') return null;
  const segments = parsed.pathname.replace(/\/+$/, '').split('/').slice(1);
  if (segments.length !== 2) return null;
  const owner = segments[0] ?? '';
  const name = (segments[1] ?? '').replace(/\.git$/, '');
  if (!OWNER.test(owner) || !NAME.test(name) || name === '.' || name === '..') return null;
  return { origin: parsed.origin.toLowerCase(), owner, name };
}

/**
 * The web origin whose repositories an API serves: `https://api.github.com` serves `https://github.com`,
 * `https://api.{tenant}.ghe.com` serves `https://{tenant}.ghe.com`, and a GitHub Enterprise Server API at
 * `https://{host}/api/v3` serves `https://{host}`.
 */
export function webOriginOfApiUrl(apiUrl: string): string {
  const parsed = new URL(apiUrl);
  const host = parsed.host.toLowerCase();
  if (host === 'api.github.com') return 'https://github.com';
  if (host.startsWith('api.') && host.endsWith('.ghe.com')) return `${parsed.protocol}//${host.slice(4)}`;
  return parsed.origin.toLowerCase();
}

/** True when both URLs name the same repository; GitHub owner and repository names ignore case. */
export function sameRepository(a: string, b: string): boolean {
  const left = parseRepositoryUrl(a);
  const right = parseRepositoryUrl(b);
  return (
    left !== null &&
    right !== null &&
    left.origin === right.origin &&
    left.owner.toLowerCase() === right.owner.toLowerCase() &&
    left.name.toLowerCase() === right.name.toLowerCase()
  );
}
