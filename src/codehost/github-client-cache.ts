/**
 * One GitHubClient per integration, kept so an App installation token is exchanged once and reused until
 * it expires. An entry is keyed by the integration id and a fingerprint of its API URL and
 * credentials: when the credentials change, the fingerprint changes and the old client (with a token
 * minted from the old credentials) is dropped, without the caller having to remember to evict.
 */
import { credentialsFingerprint } from './credentials-fingerprint.ts';
import { GitHubClient, GITHUB_API_URL, type CodeHostCredentials, type GitHubClientOptions } from './github-client.ts';

export interface CodeHostIntegrationAccess {
  id: string;
  /** Default https://api.github.com. */
  apiUrl?: string | null;
  credentials: CodeHostCredentials;
}

/** Bounds memory; each client holds at most one token, so this is generous. */
const DEFAULT_MAX_CLIENTS = 1000;

export class GitHubClientCache {
  readonly #clients = new Map<string, { fingerprint: string; client: GitHubClient }>();

  /** `options` apply to every client (timeouts, retries, clock, logger); `apiUrl` comes per integration. */
  constructor(
    private readonly options: Omit<GitHubClientOptions, 'apiUrl'> = {},
    private readonly maxClients: number = DEFAULT_MAX_CLIENTS,
  ) {}

  forIntegration(integration: CodeHostIntegrationAccess): GitHubClient {
    const apiUrl = integration.apiUrl ?? GITHUB_API_URL;
    const key = credentialsFingerprint(apiUrl, integration.credentials);
    const cached = this.#clients.get(integration.id);
    // Re-inserting keeps the Map's order least-recently-used first.
    this.#clients.delete(integration.id);
    if (cached !== undefined && cached.fingerprint === key) {
      this.#clients.set(integration.id, cached);
      return cached.client;
    }
    const client = new GitHubClient(integration.credentials, { ...this.options, apiUrl });
    this.#clients.set(integration.id, { fingerprint: key, client });
    if (this.#clients.size > this.maxClients) {
      const oldest = this.#clients.keys().next();
      if (oldest.done !== true) this.#clients.delete(oldest.value);
    }
    return client;
  }

  /** Forget an integration's client, e.g. when the integration is deleted. */
  evict(integrationId: string): void {
    this.#clients.delete(integrationId);
  }
}
