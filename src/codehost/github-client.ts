/**
 * A client of one code-host integration on GitHub or GitHub Enterprise Server (both speak the GitHub REST
 * API), built on Octokit: `@octokit/auth-app` signs the app JWT and exchanges it for an installation
 * token, `@octokit/plugin-retry` retries 5xx answers with back-off, `octokit.paginate` follows `Link`.
 *
 * One instance per integration is meant to live in a GitHubClientCache, because the installation token
 * lives in the instance's auth state: a new instance per call would exchange a new token per call.
 */
import { createPrivateKey } from 'node:crypto';
import { Octokit } from '@octokit/rest';
import { retry } from '@octokit/plugin-retry';
import { createAppAuth } from '@octokit/auth-app';
import { CodeHostError, classifyHostFailure, isTokenExchangeFailure } from './codehost-error.ts';
import { InstallationTokenCache } from './installation-token-cache.ts';
import { credentialsFingerprint } from './credentials-fingerprint.ts';
import { withInstallationGate } from './installation-gate.ts';
import { parseRepositoryUrl, webOriginOfApiUrl } from './repository-url.ts';

export const GITHUB_API_URL = 'https://api.github.com';

/** Either a token (personal access token, fine-grained token) or a GitHub App installation. */
export type CodeHostCredentials =
  | { token: string }
  | { app_id: string | number; private_key: string; installation_id: string | number };

/** A repository as the interface lists it, without `host_integration_id` (the caller adds it). */
export interface CodeHostRepository {
  id: number;
  name: string;
  owner: string;
  /** The repository's web URL (`html_url`); deployments use it as `source_config.repo_url`. */
  url: string;
  default_branch: string;
}

/** Octokit's logger shape; the service passes its own, the default drops everything. */
export interface CodeHostLog {
  debug: (message: string) => unknown;
  info: (message: string) => unknown;
  warn: (message: string) => unknown;
  error: (message: string) => unknown;
}

export interface GitHubClientOptions {
  /** Default https://api.github.com; GitHub Enterprise Server is `https://{host}/api/v3`. */
  apiUrl?: string;
  /** Per-request timeout. Default 15 s. */
  timeoutMs?: number;
  /** Retries of a 5xx answer or a failed connection. Default 2. */
  retries?: number;
  /** Back-off unit: retry n waits n² times this. Default 1000 ms (Octokit's own). */
  retryBaseDelayMs?: number;
  /** Clock for token expiry and Retry-After dates. */
  now?: () => number;
  log?: CodeHostLog;
  userAgent?: string;
}

export type RepositoryUrlCheck =
  | { ok: true; repository: CodeHostRepository }
  | { ok: false; reason: 'malformed' | 'other_host' | 'not_reachable'; message: string };

const silentLog: CodeHostLog = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

const RetryingOctokit = Octokit.plugin(retry);
type RetryingOctokitInstance = InstanceType<typeof RetryingOctokit>;

// 429 is a rate limit, answered to the user with Retry-After rather than waited out inside a request.
const DO_NOT_RETRY = [400, 401, 403, 404, 410, 422, 429, 451];

interface HostRepository {
  id: number;
  name: string;
  owner: { login: string };
  html_url: string;
  default_branch?: string;
}

function toRepository(repo: HostRepository): CodeHostRepository {
  return {
    id: repo.id,
    name: repo.name,
    owner: repo.owner.login,
    url: repo.html_url,
    // GitHub always sends it; an empty repository reports the default the host would use.
    default_branch: repo.default_branch ?? 'main',
  };
}

function isAppCredentials(
  credentials: CodeHostCredentials,
): credentials is Extract<CodeHostCredentials, { app_id: string | number }> {
  return 'app_id' in credentials;
}

/** Keys pasted through environment variables or JSON often carry `\n` literally. */
function normalizePrivateKey(pem: string): string {
  return pem.replace(/\\n/g, '\n');
}

function isNotFound(error: unknown): boolean {
  return (
    error instanceof Error &&
    'status' in error &&
    (error as { status: unknown }).status === 404 &&
    'response' in error &&
    (error as { response: unknown }).response !== undefined &&
    !isTokenExchangeFailure(error)
  );
}

export class GitHubClient {
  readonly apiUrl: string;
  readonly #octokit: RetryingOctokitInstance;
  readonly #credentials: CodeHostCredentials;
  readonly #host: string;
  readonly #secrets: string[];
  readonly #now: () => number;
  readonly #fingerprint: string;
  /** Set when the credentials cannot work at all; every call rejects with it. */
  readonly #configurationError: CodeHostError | undefined;

  constructor(credentials: CodeHostCredentials, options: GitHubClientOptions = {}) {
    this.apiUrl = (options.apiUrl ?? GITHUB_API_URL).replace(/\/+$/, '');
    this.#credentials = credentials;
    this.#host = new URL(this.apiUrl).host;
    this.#now = options.now ?? Date.now;
    this.#fingerprint = credentialsFingerprint(this.apiUrl, credentials);
    const timeoutMs = options.timeoutMs ?? 15_000;
    const common = {
      baseUrl: this.apiUrl,
      userAgent: options.userAgent ?? 'slipway',
      log: options.log ?? silentLog,
      retry: {
        retries: options.retries ?? 2,
        retryAfterBaseValue: options.retryBaseDelayMs ?? 1000,
        doNotRetry: DO_NOT_RETRY,
      },
      request: {
        // A fresh timeout per request: one signal in the options would be shared by all of them.
        fetch: (url: string | URL, init?: RequestInit) =>
          fetch(url, { ...init, signal: init?.signal ?? AbortSignal.timeout(timeoutMs) }),
      },
    };
    if (isAppCredentials(credentials)) {
      const privateKey = normalizePrivateKey(credentials.private_key);
      this.#secrets = [credentials.private_key, privateKey];
      this.#configurationError = checkAppCredentials(credentials, privateKey);
      this.#octokit = new RetryingOctokit({
        ...common,
        authStrategy: createAppAuth,
        auth: {
          appId: credentials.app_id,
          privateKey,
          installationId: credentials.installation_id,
          cache: new InstallationTokenCache(this.#now),
        },
      });
    } else {
      this.#secrets = [credentials.token];
      this.#configurationError =
        credentials.token.trim() === '' ? new CodeHostError('rejected', 'The integration token is empty.') : undefined;
      this.#octokit = new RetryingOctokit({ ...common, auth: credentials.token });
    }
  }

  /** Every repository the integration reaches, over all pages of the host's listing. */
  async listRepositories(): Promise<CodeHostRepository[]> {
    const repos = await this.#call('listing repositories', async () =>
      isAppCredentials(this.#credentials)
        ? this.#octokit.paginate(this.#octokit.rest.apps.listReposAccessibleToInstallation, { per_page: 100 })
        : this.#octokit.paginate(this.#octokit.rest.repos.listForAuthenticatedUser, { per_page: 100 }),
    );
    // Pages can shift while a listing is under way (a repository created meanwhile); keep each id once.
    const byId = new Map<number, CodeHostRepository>();
    for (const repo of repos) byId.set(repo.id, toRepository(repo));
    return [...byId.values()];
  }

  /**
   * One cheap authenticated request (the first page of the listing, one item) to learn whether the host
   * accepts the credentials; for an App it also exchanges the installation token. Throws CodeHostError.
   */
  async verifyCredentials(): Promise<void> {
    await this.#call('checking the credentials', async () => {
      if (isAppCredentials(this.#credentials)) {
        await this.#octokit.rest.apps.listReposAccessibleToInstallation({ per_page: 1 });
      } else {
        await this.#octokit.rest.repos.listForAuthenticatedUser({ per_page: 1 });
      }
    });
  }

  /**
   * The repository `owner/name` if the integration reaches it, else null. For a GitHub App the
   * installation must cover it: an installation token can read any public repository, but pushes of a
   * repository outside the installation never reach us, and the listing would not show it.
   */
  async getRepository(owner: string, name: string): Promise<CodeHostRepository | null> {
    return this.#call('reading a repository', async () => {
      try {
        // Read first: it needs the installation token, so a missing installation is reported as such.
        const { data } = await this.#octokit.rest.repos.get({ owner, repo: name });
        if (isAppCredentials(this.#credentials)) {
          const { data: installation } = await this.#octokit.rest.apps.getRepoInstallation({ owner, repo: name });
          if (String(installation.id) !== String(this.#credentials.installation_id)) return null;
        }
        return toRepository(data);
      } catch (error) {
        if (isNotFound(error)) return null;
        throw error;
      }
    });
  }

  /**
   * Whether `url` names a repository on this integration's host that the integration reaches; used to
   * check `repo_url` of a codehost deployment.
   */
  async checkRepositoryUrl(url: string): Promise<RepositoryUrlCheck> {
    const location = parseRepositoryUrl(url);
    if (location === null) {
      return { ok: false, reason: 'malformed', message: 'is not a repository URL of the form https://{host}/{owner}/{name}' };
    }
    const origin = webOriginOfApiUrl(this.apiUrl);
    if (location.origin !== origin) {
      return { ok: false, reason: 'other_host', message: `is not on the integration's host ${origin}` };
    }
    const repository = await this.getRepository(location.owner, location.name);
    if (repository === null) {
      return {
        ok: false,
        reason: 'not_reachable',
        message: `is not a repository the integration can reach (${location.owner}/${location.name})`,
      };
    }
    return { ok: true, repository };
  }

  async #call<T>(action: string, run: () => Promise<T>): Promise<T> {
    if (this.#configurationError !== undefined) throw this.#configurationError;
    const credentials = this.#credentials;
    try {
      return isAppCredentials(credentials)
        ? await withInstallationGate(String(credentials.installation_id), this.#fingerprint, run)
        : await run();
    } catch (error) {
      throw classifyHostFailure(error, { host: this.#host, action, secrets: this.#secrets, nowMs: this.#now() });
    }
  }
}

function checkAppCredentials(
  credentials: Extract<CodeHostCredentials, { app_id: string | number }>,
  privateKey: string,
): CodeHostError | undefined {
  if (!/^[1-9]\d*$/.test(String(credentials.installation_id))) {
    return new CodeHostError('rejected', 'The GitHub App installation_id must be a positive integer.');
  }
  if (String(credentials.app_id).trim() === '') {
    return new CodeHostError('rejected', 'The GitHub App app_id is empty.');
  }
  try {
    const key = createPrivateKey(privateKey);
    if (key.asymmetricKeyType !== 'rsa') throw new Error('not RSA');
  } catch {
    // Never the key itself, nor the parser's message, which may quote it.
    return new CodeHostError('rejected', 'The GitHub App private_key is not a PEM-encoded RSA private key.');
  }
  return undefined;
}
