/**
 * The installation-token cache handed to `@octokit/auth-app`. Its built-in cache keeps a token for a fixed
 * 59 minutes whatever `expires_at` the host returned; a GitHub Enterprise Server (or a fake) may issue
 * shorter-lived tokens, so this one keeps each token until shortly before its own `expires_at`.
 */

/** A token this close to expiry is refreshed, so a listing of many pages does not start with a dying token. */
const REFRESH_MARGIN_MS = 5 * 60 * 1000;

export class InstallationTokenCache {
  readonly #entries = new Map<string, { value: string; staleAtMs: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * auth-app's cache contract is `get(key): string`, and it treats a falsy value as a miss, so a miss is
   * the empty string.
   */
  get(key: string): string {
    const entry = this.#entries.get(key);
    if (entry === undefined) return '';
    if (this.now() >= entry.staleAtMs) {
      this.#entries.delete(key);
      return '';
    }
    return entry.value;
  }

  /** auth-app stores `token|createdAt|expiresAt|...`; the third field is the host's expiry. */
  set(key: string, value: string): void {
    const fields = value.split('|');
    const createdAtMs = Date.parse(fields[1] ?? '');
    const expiresAtMs = Date.parse(fields[2] ?? '');
    // Without a readable expiry, keep the token for no time at all rather than risk using a dead one.
    if (Number.isNaN(expiresAtMs)) return;
    // A short-lived token would be refreshed on every call with the full margin; use half its life then.
    const lifetimeMs = Number.isNaN(createdAtMs) ? Infinity : expiresAtMs - createdAtMs;
    const margin = Math.min(REFRESH_MARGIN_MS, lifetimeMs / 2);
    this.#entries.set(key, { value, staleAtMs: expiresAtMs - margin });
  }
}
