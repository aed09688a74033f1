/**
 * The operator's allow-list of code-host API URLs (SLIPWAY_CODEHOST_ALLOWED_URLS). An integration makes
 * the service connect to its api_url, so an api_url off the list would let whoever writes integrations
 * reach any host the service can, internal ones included.
 *
 * A prefix matches whole origins (scheme, host and port) and whole path segments: a plain string
 * prefix would let `https://api.github.com.evil.example` pass for `https://api.github.com`.
 */

/** Whether `apiUrl` (any URL; normalized here) lies under one of `allowed` (normalized prefixes, see src/config.ts). */
export function isAllowedApiUrl(apiUrl: string, allowed: readonly string[]): boolean {
  if (!URL.canParse(apiUrl)) return false;
  const url = new URL(apiUrl);
  // Credentials, a query or a fragment never belong to an API base URL; refuse rather than interpret.
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') return false;
  const path = url.pathname.replace(/\/+$/, '');
  return allowed.some((entry) => {
    if (!URL.canParse(entry)) return false;
    const prefix = new URL(entry);
    if (prefix.origin !== url.origin) return false;
    const prefixPath = prefix.pathname.replace(/\/+$/, '');
    return path === prefixPath || path.startsWith(`${prefixPath}/`);
  });
}

/** The refusal's text: it names the setting, so the person refused knows whom to ask. */
export function notAllowedMessage(apiUrl: string): string {
  return `api_url ${apiUrl} is not among the code hosts this service may reach (SLIPWAY_CODEHOST_ALLOWED_URLS); an operator can add it to that list`;
}
