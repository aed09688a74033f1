/**
 * A client of one code-host integration on GitHub or GitHub Enterprise Server (both speak the GitHub REST
 * API), built on Octokit: `@octokit/auth-app` signs the app JWT and exchanges it for an installation
 * token, `@octokit/plugin-retry` retries 5xx answers with back-off, `octokit.paginate` follows `Link`.
 *
 * One instance per integration is meant to live in a GitHubClientCache, because the installation token
 * lives in the instance's auth state: a new instance per call would exchange a new token per call.
 */
import { createPrivateKey } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
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
  { token: string } | { app_id: string | number; private_key: string; installation_id: string | number };

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
  /** Deadline of a whole tarball download, body included. Default 10 minutes. */
  downloadTimeoutMs?: number;
  /** Largest tarball accepted; a larger one is cut off and refused. Default 1 GiB. */
  maxDownloadBytes?: number;
}

export type RepositoryUrlCheck =
  | { ok: true; repository: CodeHostRepository }
  | { ok: false; reason: 'malformed' | 'other_host' | 'not_reachable'; message: string };

/**
 * The host has no such thing: a ref that names no branch, tag or commit, a repository that is gone (or out
 * of the integration's reach), an empty repository. It is the user's configuration that is wrong, so callers
 * answer it as a bad reference; to the generic mapping it is an `unexpected` answer.
 */
export class CodeHostNotFoundError extends CodeHostError {
  constructor(message: string, hostStatus: number) {
    super('unexpected', message, hostStatus);
    this.name = 'CodeHostNotFoundError';
  }
}

// SHA-1 object names, or SHA-256 ones for repositories using the newer object format.
const COMMIT_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const DEFAULT_DOWNLOAD_TIMEOUT_MS = 10 * 60 * 1000;
const DEFAULT_MAX_DOWNLOAD_BYTES = 1024 ** 3;

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

/** The status of an answer the host gave to the request itself (not to the token exchange), if any. */
function answeredStatus(error: unknown): number | undefined {
  if (
    error instanceof Error &&
    'status' in error &&
    typeof (error as { status: unknown }).status === 'number' &&
    'response' in error &&
    (error as { response: unknown }).response !== undefined &&
    !isTokenExchangeFailure(error)
  ) {
    return (error as { status: number }).status;
  }
  return undefined;
}

function isNotFound(error: unknown): boolean {
  return answeredStatus(error) === 404;
}

/** The text of a body Octokit did not parse as JSON: a string, or bytes when the host sent no charset. */
function bodyText(body: unknown): string | undefined {
  if (typeof body === 'string') return body;
  if (body instanceof ArrayBuffer) return Buffer.from(body).toString('utf8');
  return undefined;
}

/** A deadline that ran out; left to classifyHostFailure, which reports it as the host not answering in time. */
function isDeadline(error: unknown): boolean {
  return error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError');
}

export class GitHubClient {
  readonly apiUrl: string;
  readonly #octokit: RetryingOctokitInstance;
  readonly #credentials: CodeHostCredentials;
  readonly #host: string;
  readonly #secrets: string[];
  readonly #now: () => number;
  readonly #fingerprint: string;
  readonly #downloadTimeoutMs: number;
  readonly #maxDownloadBytes: number;
  readonly #log: CodeHostLog;
  /** Set when the credentials cannot work at all; every call rejects with it. */
  readonly #configurationError: CodeHostError | undefined;

  constructor(credentials: CodeHostCredentials, options: GitHubClientOptions = {}) {
    this.apiUrl = (options.apiUrl ?? GITHUB_API_URL).replace(/\/+$/, '');
    this.#credentials = credentials;
    this.#host = new URL(this.apiUrl).host;
    this.#now = options.now ?? Date.now;
    this.#fingerprint = credentialsFingerprint(this.apiUrl, credentials);
    this.#downloadTimeoutMs = options.downloadTimeoutMs ?? DEFAULT_DOWNLOAD_TIMEOUT_MS;
    this.#maxDownloadBytes = options.maxDownloadBytes ?? DEFAULT_MAX_DOWNLOAD_BYTES;
    this.#log = options.log ?? silentLog;
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
      return {
        ok: false,
        reason: 'malformed',
        message: 'is not a repository URL of the form https://{host}/{owner}/{name}',
      };
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

  /**
   * The full sha of the commit `ref` names in `owner/name`: a branch, a tag, `refs/heads/…`, `refs/tags/…`
   * or a (possibly abbreviated) commit sha. Asks for the sha media type, so that the host answers with the
   * sha alone rather than the commit with its diff. Throws CodeHostNotFoundError when the repository has no
   * such ref, or is empty or out of reach; CodeHostError otherwise.
   */
  async resolveCommit(owner: string, name: string, ref: string): Promise<string> {
    const repository = `${owner}/${name}`;
    return this.#call(`resolving '${ref}' in ${repository}`, async () => {
      let body: unknown;
      try {
        // GitHub documents `heads/…` and `tags/…` for this endpoint; `refs/heads/…` is what webhooks and git say.
        const hostRef = ref.replace(/^refs\/(?=heads\/|tags\/)/, '');
        ({ data: body } = await this.#octokit.rest.repos.getCommit({
          owner,
          repo: name,
          ref: hostRef,
          mediaType: { format: 'sha' },
        }));
      } catch (error) {
        const status = answeredStatus(error);
        // GitHub answers an unknown ref with 422 ("No commit found for SHA"), a missing repository with 404
        // and an empty one with 409.
        if (status === 422)
          throw new CodeHostNotFoundError(
            `The ref '${ref}' does not exist in ${repository}: it names no branch, tag or commit there.`,
            status,
          );
        if (status === 404)
          throw new CodeHostNotFoundError(
            `The repository ${repository} does not exist on ${this.#host}, or the integration cannot reach it (looking up '${ref}').`,
            status,
          );
        if (status === 409)
          throw new CodeHostNotFoundError(`The repository ${repository} is empty: '${ref}' names no commit.`, status);
        throw error;
      }
      // A host that ignores the media type answers with the commit as JSON, which carries the sha too.
      const text =
        bodyText(body) ?? (typeof body === 'object' && body !== null && 'sha' in body ? String(body.sha) : '');
      const sha = text.trim().toLowerCase();
      if (!COMMIT_SHA.test(sha)) {
        throw new CodeHostError(
          'unexpected',
          `The code host ${this.#host} answered the lookup of '${ref}' in ${repository} with something that is not a commit sha.`,
        );
      }
      return sha;
    });
  }

  /**
   * Writes the gzipped tarball of `owner/name` at `ref` (give a resolved commit sha, so that the tarball is
   * the commit reported) to `destFile`, and returns its size. GitHub answers with a redirect to a
   * short-lived codeload URL, which fetch follows, dropping the Authorization header if it leaves the API's
   * origin. The body streams to the file under its own deadline (a tarball may take longer than an API
   * call); a failure removes the partial file.
   */
  async downloadTarball(owner: string, name: string, ref: string, destFile: string): Promise<{ bytes: number }> {
    const repository = `${owner}/${name}`;
    const host = this.#host;
    const limit = this.#maxDownloadBytes;
    return this.#call(`downloading ${repository} at ${ref}`, async () => {
      let body: unknown;
      try {
        ({ data: body } = await this.#octokit.rest.repos.downloadTarballArchive({
          owner,
          repo: name,
          ref,
          request: { parseSuccessResponseBody: false, signal: AbortSignal.timeout(this.#downloadTimeoutMs) },
        }));
      } catch (error) {
        const status = answeredStatus(error);
        if (status === 404)
          throw new CodeHostNotFoundError(`The code host ${host} has no tarball of ${repository} at '${ref}'.`, status);
        throw error;
      }
      if (!(body instanceof ReadableStream)) {
        throw new CodeHostError(
          'unexpected',
          `The code host ${host} answered the download of ${repository} at '${ref}' without a tarball.`,
        );
      }
      let bytes = 0;
      const meter = async function* (source: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
        for await (const chunk of source) {
          bytes += chunk.length;
          if (bytes > limit)
            throw new CodeHostError(
              'unexpected',
              `The tarball of ${repository} at '${ref}' is larger than ${limit} bytes, the most a source may have.`,
            );
          yield chunk;
        }
      };
      const file = createWriteStream(destFile, { mode: 0o600 });
      let fileError: unknown;
      file.on('error', (error) => {
        fileError = error;
      });
      try {
        await pipeline(body, meter, file);
      } catch (error) {
        await fs.rm(destFile, { force: true });
        // Ours (a full disk, the size limit) or the deadline: as they are. Anything else broke the body off.
        if (error === fileError || error instanceof CodeHostError || isDeadline(error)) throw error;
        // The message never shows a URL: codeload's carries a token.
        const reason = error instanceof Error ? error.message.replace(/\w+:\/\/\S+/g, '[url]') : String(error);
        throw new CodeHostError(
          'unavailable',
          `The code host ${host} broke off the download of ${repository} at '${ref}' (${reason}).`,
        );
      }
      return { bytes };
    });
  }

  /**
   * Sets a commit status on `sha` of `owner/name` (GitHub `POST /repos/{owner}/{repo}/statuses/{sha}`); a
   * newer status of the same `context` replaces the older one on the pull request. A token needs the
   * repository permission *Commit statuses: write* (classic: `repo:status`), an App the same permission.
   */
  async createCommitStatus(
    owner: string,
    name: string,
    sha: string,
    status: {
      state: 'pending' | 'success' | 'failure' | 'error';
      target_url: string | null;
      description: string;
      context: string;
    },
  ): Promise<void> {
    if (!COMMIT_SHA.test(sha)) throw new CodeHostError('unexpected', `'${sha}' is not a commit sha.`);
    await this.#call(`setting a commit status on ${owner}/${name}`, async () => {
      await this.#octokit.rest.repos.createCommitStatus({
        owner,
        repo: name,
        sha,
        state: status.state,
        ...(status.target_url !== null ? { target_url: status.target_url } : {}),
        // GitHub refuses a description over 140 characters.
        description: status.description.length > 140 ? `${status.description.slice(0, 139)}…` : status.description,
        context: status.context,
      });
    });
  }

  async #call<T>(action: string, run: () => Promise<T>): Promise<T> {
    if (this.#configurationError !== undefined) throw this.#configurationError;
    const credentials = this.#credentials;
    try {
      return isAppCredentials(credentials)
        ? await withInstallationGate(String(credentials.installation_id), this.#fingerprint, run)
        : await run();
    } catch (error) {
      const failure = classifyHostFailure(error, {
        host: this.#host,
        apiUrl: this.apiUrl,
        action,
        secrets: this.#secrets,
        nowMs: this.#now(),
      });
      // The caller is told only that the host could not be reached; the operator needs the why.
      if (failure instanceof CodeHostError && failure.logDetail !== undefined)
        this.#log.warn(`${failure.message} Cause: ${failure.logDetail}`);
      throw failure;
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
