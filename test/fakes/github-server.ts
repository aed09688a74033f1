/**
 * A GitHub-compatible REST API on loopback for tests: the endpoints Slipway calls, answering like
 * api.github.com does (Link pagination, `{ total_count, repositories }` for installations, RS256 app JWTs
 * verified with the app's public key, GitHub's error bodies and rate-limit headers).
 *
 *   const app = createTestApp();
 *   const github = await startFakeGitHub({ repositories: makeRepositories(250), tokens: { 'ghp_x': 'all' },
 *     apps: [{ id: app.id, publicKey: app.publicKey, installations: { 7: 'all' } }] });
 *   ... new GitHubClient({ token: 'ghp_x' }, { apiUrl: github.url }) ...
 *   await github.close();
 *
 * Repository contents, for the commits and tarball endpoints:
 *
 *   const sha = github.setRepositoryFiles('octo-org', 'repo-001', { 'slipway.json': '{}' }, { branch: 'main', tags: ['v1'] });
 *
 * Commit statuses (`POST /repos/{owner}/{repo}/statuses/{sha}`) are checked as GitHub checks them (the
 * credential must cover the repository and may write statuses, the commit must exist, `state` is one of
 * four, `description` at most 140 characters) and recorded in `statuses`, in the order they came.
 *
 * The tarball endpoint redirects (302) to a codeload-like path on the same server, which serves a real
 * `.tar.gz` laid out like GitHub's: a pax global header carrying the sha, then every file under
 * `{owner}-{repo}-{shortsha}/`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, generateKeyPairSync, randomBytes, verify, type KeyObject } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import * as tar from 'tar';

export interface FakeRepository {
  id: number;
  owner: string;
  name: string;
  default_branch: string;
  /** Private repositories are visible only to credentials that cover them; public ones to any. */
  private: boolean;
}

/** Which repositories a credential reaches: ids, or every repository of the server. */
export type FakeVisibility = number[] | 'all';

export interface FakeApp {
  id: number;
  publicKey: KeyObject;
  /** Installation id -> repositories it covers. */
  installations: Record<number, FakeVisibility>;
}

export interface FakeFailure {
  status: number;
  /** Answer as a rate limit: `x-ratelimit-remaining: 0` and GitHub's rate-limit message. */
  rateLimited?: boolean;
  retryAfterSeconds?: number;
  message?: string;
  /** Only requests whose path (without the prefix) starts with this fail. */
  path?: string;
  /** How many requests fail; unlimited (until clearFailures) when absent. */
  times?: number;
}

export interface FakeGitHubOptions {
  repositories?: FakeRepository[];
  /** Personal access tokens the server accepts. */
  tokens?: Record<string, FakeVisibility>;
  apps?: FakeApp[];
  /** Tokens that may read but not write commit statuses (a fine-grained token with Contents: read only). */
  readOnlyTokens?: string[];
  /** `/api/v3` to serve like GitHub Enterprise Server. */
  pathPrefix?: string;
  installationTokenLifetimeSeconds?: number;
  /**
   * Clock for installation-token expiry and rate-limit reset times, in milliseconds. App JWTs are always
   * checked against the real clock, since the library signs them with it.
   */
  now?: () => number;
}

export interface RecordedRequest {
  method: string;
  /** Path without the prefix and query, e.g. `/user/repos`. */
  path: string;
  query: Record<string, string>;
  authorization: string | undefined;
  status: number;
}

/** A commit status the server accepted. */
export interface RecordedCommitStatus {
  owner: string;
  repo: string;
  sha: string;
  state: 'error' | 'failure' | 'pending' | 'success';
  target_url: string | null;
  description: string | null;
  context: string;
}

export interface IssuedInstallationToken {
  token: string;
  installationId: number;
  expiresAtMs: number;
}

export interface TestApp {
  id: number;
  /** PKCS#1 PEM, the format GitHub hands out for App keys. */
  privateKey: string;
  publicKey: KeyObject;
}

/** An App identity with a fresh RSA key pair. */
export function createTestApp(id = 4242): TestApp {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { id, privateKey: privateKey.export({ type: 'pkcs1', format: 'pem' }).toString(), publicKey };
}

/** `count` private repositories `repo-001`… with ids 1001… owned by `owner`. */
export function makeRepositories(count: number, owner = 'octo-org'): FakeRepository[] {
  return Array.from({ length: count }, (_, i) => ({
    id: 1001 + i,
    owner,
    name: `repo-${String(i + 1).padStart(3, '0')}`,
    default_branch: i % 5 === 0 ? 'master' : 'main',
    private: true,
  }));
}

/** Where `setRepositoryFiles` puts a commit. */
export interface FakeCommitOptions {
  /** Branch that points at the commit; default the repository's default branch. */
  branch?: string;
  /** Tags that point at it too. */
  tags?: string[];
  /** 40 hex digits; default a hash of the files. */
  sha?: string;
}

interface FakeContents {
  /** sha -> files (path -> content). */
  commits: Map<string, Record<string, string>>;
  /** `refs/heads/main` or `refs/tags/v1` -> sha. */
  refs: Map<string, string>;
}

interface Answer {
  status: number;
  body?: unknown;
  /** Sent as it is instead of `body` as JSON; set content-type in `headers`. */
  raw?: string | Buffer;
  headers?: Record<string, string>;
}

const DOCS = 'https://docs.github.com/rest';

export class FakeGitHub {
  readonly requests: RecordedRequest[] = [];
  readonly issuedTokens: IssuedInstallationToken[] = [];
  readonly statuses: RecordedCommitStatus[] = [];
  #failures: FakeFailure[] = [];
  /** By `owner/name` in lowercase, like GitHub's case-insensitive lookup. */
  readonly #contents = new Map<string, FakeContents>();
  readonly #tarballs = new Map<string, Buffer>();
  /** Tokens of the codeload URLs handed out, like GitHub's short-lived signed URLs. */
  readonly #downloadTokens = new Set<string>();
  readonly #server = createServer((req, res) => void this.#handle(req, res));
  #origin = '';

  constructor(private readonly options: FakeGitHubOptions) {}

  /** API base URL, to pass as an integration's api_url. */
  get url(): string {
    return `${this.#origin}${this.options.pathPrefix ?? ''}`;
  }

  /** Web origin of the repositories (`html_url`), like a GitHub Enterprise Server host. */
  get webOrigin(): string {
    return this.#origin;
  }

  get repositories(): FakeRepository[] {
    return this.options.repositories ?? [];
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const { port } = this.#server.address() as AddressInfo;
    this.#origin = `http://127.0.0.1:${port}`;
    return this;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.#server.close((error) => (error ? reject(error) : resolve())));
  }

  failWith(failure: FakeFailure): void {
    this.#failures.push({ ...failure });
  }

  clearFailures(): void {
    this.#failures = [];
  }

  /**
   * Gives `owner/name` a commit holding `files` and points a branch (and tags) at it; returns its sha. The
   * repository is added (private, covered by 'all' visibilities) when the server does not have it. A later
   * call moves the branch; the earlier commit stays reachable by its sha.
   */
  setRepositoryFiles(
    owner: string,
    name: string,
    files: Record<string, string>,
    options: FakeCommitOptions = {},
  ): string {
    for (const file of Object.keys(files)) {
      if (file.startsWith('/') || file.split('/').includes('..'))
        throw new Error(`fake github: ${file} is not a relative path`);
    }
    let repo = this.#findRepository(owner, name);
    if (repo === undefined) {
      repo = {
        id: 1 + Math.max(1000, ...this.repositories.map((r) => r.id)),
        owner,
        name,
        default_branch: options.branch ?? 'main',
        private: true,
      };
      this.options.repositories = [...this.repositories, repo];
    }
    const sha =
      options.sha ??
      createHash('sha1')
        .update(JSON.stringify([owner, name, Object.entries(files).sort()]))
        .digest('hex');
    if (!/^[0-9a-f]{40}$/.test(sha)) throw new Error(`fake github: ${sha} is not a 40-hex sha`);
    const key = `${repo.owner}/${repo.name}`.toLowerCase();
    const contents = this.#contents.get(key) ?? { commits: new Map(), refs: new Map() };
    this.#contents.set(key, contents);
    contents.commits.set(sha, { ...files });
    contents.refs.set(`refs/heads/${options.branch ?? repo.default_branch}`, sha);
    for (const tag of options.tags ?? []) contents.refs.set(`refs/tags/${tag}`, sha);
    return sha;
  }

  /** Requests seen for `method path` (path without prefix). */
  requestsTo(method: string, pathPattern: RegExp | string): RecordedRequest[] {
    return this.requests.filter(
      (r) =>
        r.method === method && (typeof pathPattern === 'string' ? r.path === pathPattern : pathPattern.test(r.path)),
    );
  }

  #now(): number {
    return (this.options.now ?? Date.now)();
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const requestBody = Buffer.concat(chunks);
    const url = new URL(req.url ?? '/', this.#origin);
    const prefix = this.options.pathPrefix ?? '';
    const path = url.pathname.startsWith(prefix) ? url.pathname.slice(prefix.length) : url.pathname;
    const method = req.method ?? 'GET';
    let answer: Answer;
    try {
      answer =
        this.#injectedFailure(path) ??
        (await this.#route(method, path, url, req.headers.authorization, req.headers.accept, requestBody));
    } catch (error) {
      answer = { status: 500, body: { message: `fake github: ${String(error)}` } };
    }
    this.requests.push({
      method,
      path,
      query: Object.fromEntries(url.searchParams),
      authorization: req.headers.authorization,
      status: answer.status,
    });
    const body = answer.raw ?? (answer.body === undefined ? '' : JSON.stringify(answer.body));
    res.writeHead(answer.status, {
      'content-type': 'application/json; charset=utf-8',
      'x-github-request-id': randomBytes(4).toString('hex').toUpperCase(),
      ...answer.headers,
    });
    res.end(body);
  }

  #injectedFailure(path: string): Answer | undefined {
    const index = this.#failures.findIndex((f) => f.path === undefined || path.startsWith(f.path));
    const failure = this.#failures[index];
    if (failure === undefined) return undefined;
    if (failure.times !== undefined) {
      failure.times -= 1;
      if (failure.times <= 0) this.#failures.splice(index, 1);
    }
    const headers: Record<string, string> = {};
    if (failure.retryAfterSeconds !== undefined) headers['retry-after'] = String(failure.retryAfterSeconds);
    if (failure.rateLimited === true) {
      headers['x-ratelimit-limit'] = '5000';
      headers['x-ratelimit-remaining'] = '0';
      headers['x-ratelimit-used'] = '5000';
      headers['x-ratelimit-reset'] = String(Math.floor(this.#now() / 1000) + (failure.retryAfterSeconds ?? 3600));
    }
    const message =
      failure.message ??
      (failure.rateLimited === true
        ? 'API rate limit exceeded for user ID 1.'
        : failure.status === 401
          ? 'Bad credentials'
          : failure.status >= 500
            ? 'Server Error'
            : 'Error');
    return { status: failure.status, headers, body: { message, documentation_url: DOCS } };
  }

  #route(
    method: string,
    path: string,
    url: URL,
    authorization: string | undefined,
    accept: string | undefined,
    body: Buffer = Buffer.alloc(0),
  ): Answer | Promise<Answer> {
    const statuses = /^\/repos\/([^/]+)\/([^/]+)\/statuses\/([^/]+)$/.exec(path);
    if (method === 'POST' && statuses)
      return this.#createStatus(statuses[1] ?? '', statuses[2] ?? '', statuses[3] ?? '', authorization, body);
    const accessTokens = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(path);
    if (method === 'POST' && accessTokens) return this.#exchange(Number(accessTokens[1]), authorization);
    const repoInstallation = /^\/repos\/([^/]+)\/([^/]+)\/installation$/.exec(path);
    if (method === 'GET' && repoInstallation) {
      return this.#repoInstallation(repoInstallation[1] ?? '', repoInstallation[2] ?? '', authorization);
    }
    if (method === 'GET' && path === '/user/repos') {
      const visible = this.#personalToken(authorization);
      if ('status' in visible) return visible;
      const repos = this.repositories.filter((r) => this.#covers(visible.repositories, r));
      return this.#page(repos, url, (items) => items);
    }
    if (method === 'GET' && path === '/installation/repositories') {
      const visible = this.#installationToken(authorization);
      if ('status' in visible) return visible;
      const repos = this.repositories.filter((r) => this.#covers(visible.repositories, r));
      return this.#page(repos, url, (items) => ({ total_count: repos.length, repositories: items }));
    }
    const repo = /^\/repos\/([^/]+)\/([^/]+)$/.exec(path);
    if (method === 'GET' && repo) return this.#getRepository(repo[1] ?? '', repo[2] ?? '', authorization);
    // A ref with slashes comes URL-encoded (`refs%2Fheads%2Fmain`) from Octokit, or as it is from others.
    const commit = /^\/repos\/([^/]+)\/([^/]+)\/commits\/(.+)$/.exec(path);
    if (method === 'GET' && commit) {
      return this.#getCommit(
        commit[1] ?? '',
        commit[2] ?? '',
        decodeURIComponent(commit[3] ?? ''),
        authorization,
        accept,
      );
    }
    const tarball = /^\/repos\/([^/]+)\/([^/]+)\/tarball(?:\/(.+))?$/.exec(path);
    if (method === 'GET' && tarball) {
      return this.#redirectToTarball(
        tarball[1] ?? '',
        tarball[2] ?? '',
        decodeURIComponent(tarball[3] ?? ''),
        authorization,
      );
    }
    const codeload = /^\/_codeload\/([^/]+)\/([^/]+)\/legacy\.tar\.gz\/([0-9a-f]{40})$/.exec(path);
    if (method === 'GET' && codeload)
      return this.#codeload(codeload[1] ?? '', codeload[2] ?? '', codeload[3] ?? '', url);
    return { status: 404, body: { message: 'Not Found', documentation_url: DOCS } };
  }

  #covers(visibility: FakeVisibility, repo: FakeRepository): boolean {
    return visibility === 'all' || visibility.includes(repo.id);
  }

  #toJson(repo: FakeRepository): Record<string, unknown> {
    const htmlUrl = `${this.#origin}/${repo.owner}/${repo.name}`;
    return {
      id: repo.id,
      node_id: `R_${repo.id}`,
      name: repo.name,
      full_name: `${repo.owner}/${repo.name}`,
      private: repo.private,
      visibility: repo.private ? 'private' : 'public',
      owner: { login: repo.owner, id: 1, type: 'Organization' },
      html_url: htmlUrl,
      clone_url: `${htmlUrl}.git`,
      url: `${this.url}/repos/${repo.owner}/${repo.name}`,
      default_branch: repo.default_branch,
    };
  }

  /** GitHub's pagination: `per_page` (default 30, at most 100), `page` from 1, and a `Link` header. */
  #page(repos: FakeRepository[], url: URL, shape: (items: Record<string, unknown>[]) => unknown): Answer {
    const perPage = Math.min(100, Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30));
    const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
    const last = Math.max(1, Math.ceil(repos.length / perPage));
    const items = repos.slice((page - 1) * perPage, page * perPage).map((r) => this.#toJson(r));
    const link = (n: number, rel: string): string => {
      const next = new URL(url.pathname, this.#origin);
      for (const [k, v] of url.searchParams) next.searchParams.set(k, v);
      next.searchParams.set('per_page', String(perPage));
      next.searchParams.set('page', String(n));
      return `<${next.toString()}>; rel="${rel}"`;
    };
    const links: string[] = [];
    if (page > 1) links.push(link(page - 1, 'prev'), link(1, 'first'));
    if (page < last) links.push(link(page + 1, 'next'), link(last, 'last'));
    return { status: 200, body: shape(items), headers: links.length > 0 ? { link: links.join(', ') } : {} };
  }

  #personalToken(authorization: string | undefined): Answer | { repositories: FakeVisibility } {
    const token = /^(?:token|bearer)\s+(\S+)$/i.exec(authorization ?? '')?.[1];
    if (token === undefined)
      return { status: 401, body: { message: 'Requires authentication', documentation_url: DOCS } };
    const visibility = this.options.tokens?.[token];
    if (visibility !== undefined) return { repositories: visibility };
    if (this.#liveInstallationToken(token) !== undefined) {
      return { status: 403, body: { message: 'Resource not accessible by integration', documentation_url: DOCS } };
    }
    return { status: 401, body: { message: 'Bad credentials', documentation_url: DOCS } };
  }

  #installationToken(authorization: string | undefined): Answer | { repositories: FakeVisibility } {
    const token = /^(?:token|bearer)\s+(\S+)$/i.exec(authorization ?? '')?.[1];
    if (token === undefined)
      return { status: 401, body: { message: 'Requires authentication', documentation_url: DOCS } };
    const issued = this.#liveInstallationToken(token);
    if (issued === undefined) {
      if (this.options.tokens?.[token] !== undefined) {
        return {
          status: 403,
          body: {
            message:
              'You must authenticate with an installation access token in order to list repositories for an installation.',
            documentation_url: DOCS,
          },
        };
      }
      return { status: 401, body: { message: 'Bad credentials', documentation_url: DOCS } };
    }
    const installation = this.#findInstallation(issued.installationId);
    return { repositories: installation?.visibility ?? [] };
  }

  #liveInstallationToken(token: string): IssuedInstallationToken | undefined {
    return this.issuedTokens.find((t) => t.token === token && t.expiresAtMs > this.#now());
  }

  #findInstallation(installationId: number): { app: FakeApp; visibility: FakeVisibility } | undefined {
    for (const app of this.options.apps ?? []) {
      const visibility = app.installations[installationId];
      if (visibility !== undefined) return { app, visibility };
    }
    return undefined;
  }

  /** Verifies an app JWT as GitHub does: RS256 signature by the app's key, `iss`, `iat` and `exp`. */
  #verifyAppJwt(authorization: string | undefined): Answer | { app: FakeApp } {
    const refused = (message: string): Answer => ({ status: 401, body: { message, documentation_url: DOCS } });
    const jwt = /^bearer\s+(\S+)$/i.exec(authorization ?? '')?.[1];
    if (jwt === undefined) return refused('A JSON web token could not be decoded');
    const [encodedHeader, encodedPayload, encodedSignature] = jwt.split('.');
    if (encodedHeader === undefined || encodedPayload === undefined || encodedSignature === undefined) {
      return refused('A JSON web token could not be decoded');
    }
    let header: { alg?: unknown };
    let payload: { iss?: unknown; iat?: unknown; exp?: unknown };
    try {
      header = JSON.parse(Buffer.from(encodedHeader, 'base64url').toString('utf8')) as { alg?: unknown };
      payload = JSON.parse(Buffer.from(encodedPayload, 'base64url').toString('utf8')) as typeof payload;
    } catch {
      return refused('A JSON web token could not be decoded');
    }
    if (header.alg !== 'RS256') return refused('A JSON web token could not be decoded');
    const app = (this.options.apps ?? []).find((a) => String(a.id) === String(payload.iss));
    if (app === undefined) return refused('Integration not found');
    const signed = Buffer.from(`${encodedHeader}.${encodedPayload}`);
    if (!verify('RSA-SHA256', signed, app.publicKey, Buffer.from(encodedSignature, 'base64url'))) {
      return refused('A JSON web token could not be decoded');
    }
    const nowSeconds = Math.floor(Date.now() / 1000);
    if (typeof payload.iat !== 'number' || typeof payload.exp !== 'number') {
      return refused('A JSON web token could not be decoded');
    }
    // GitHub allows at most 10 minutes between iat and exp, and some clock drift.
    if (payload.exp <= nowSeconds || payload.iat > nowSeconds + 60 || payload.exp - payload.iat > 660) {
      return refused('The JWT has expired or is not yet valid');
    }
    return { app };
  }

  #exchange(installationId: number, authorization: string | undefined): Answer {
    const verified = this.#verifyAppJwt(authorization);
    if ('status' in verified) return verified;
    if (verified.app.installations[installationId] === undefined) {
      return { status: 404, body: { message: 'Not Found', documentation_url: DOCS } };
    }
    const lifetimeMs = (this.options.installationTokenLifetimeSeconds ?? 3600) * 1000;
    const issued: IssuedInstallationToken = {
      token: `ghs_${randomBytes(18).toString('hex')}`,
      installationId,
      expiresAtMs: this.#now() + lifetimeMs,
    };
    this.issuedTokens.push(issued);
    return {
      status: 201,
      body: {
        token: issued.token,
        expires_at: new Date(issued.expiresAtMs).toISOString().replace(/\.\d{3}Z$/, 'Z'),
        permissions: { contents: 'read', metadata: 'read' },
        repository_selection: verified.app.installations[installationId] === 'all' ? 'all' : 'selected',
      },
    };
  }

  #findRepository(owner: string, name: string): FakeRepository | undefined {
    return this.repositories.find(
      (r) => r.owner.toLowerCase() === owner.toLowerCase() && r.name.toLowerCase() === name.toLowerCase(),
    );
  }

  #repoInstallation(owner: string, name: string, authorization: string | undefined): Answer {
    const verified = this.#verifyAppJwt(authorization);
    if ('status' in verified) return verified;
    const repo = this.#findRepository(owner, name);
    const entry =
      repo === undefined
        ? undefined
        : Object.entries(verified.app.installations).find(([, visibility]) => this.#covers(visibility, repo));
    if (repo === undefined || entry === undefined) {
      return { status: 404, body: { message: 'Not Found', documentation_url: DOCS } };
    }
    return {
      status: 200,
      body: {
        id: Number(entry[0]),
        app_id: verified.app.id,
        account: { login: repo.owner },
        repository_selection: entry[1] === 'all' ? 'all' : 'selected',
      },
    };
  }

  #getRepository(owner: string, name: string, authorization: string | undefined): Answer {
    const repo = this.#visibleRepository(owner, name, authorization);
    if ('status' in repo) return repo;
    return { status: 200, body: this.#toJson(repo) };
  }

  /** The repository if the credentials (or none, for a public one) may read it; else GitHub's answer. */
  #visibleRepository(owner: string, name: string, authorization: string | undefined): Answer | FakeRepository {
    const token = /^(?:token|bearer)\s+(\S+)$/i.exec(authorization ?? '')?.[1];
    let visibility: FakeVisibility | undefined;
    if (token !== undefined) {
      visibility = this.options.tokens?.[token];
      const issued = this.#liveInstallationToken(token);
      if (issued !== undefined) visibility = this.#findInstallation(issued.installationId)?.visibility;
      if (visibility === undefined)
        return { status: 401, body: { message: 'Bad credentials', documentation_url: DOCS } };
    }
    const repo = this.#findRepository(owner, name);
    if (repo === undefined || (repo.private && (visibility === undefined || !this.#covers(visibility, repo)))) {
      return { status: 404, body: { message: 'Not Found', documentation_url: DOCS } };
    }
    return repo;
  }

  /** GitHub's reading of a ref: a full ref, `heads/…` or `tags/…`, a branch, a tag, then a (short) sha. */
  #resolveRef(contents: FakeContents, ref: string): string | undefined {
    const candidates = ref.startsWith('refs/') ? [ref] : [`refs/${ref}`, `refs/heads/${ref}`, `refs/tags/${ref}`];
    for (const candidate of candidates) {
      const sha = contents.refs.get(candidate);
      if (sha !== undefined) return sha;
    }
    if (!/^[0-9a-f]{7,40}$/i.test(ref)) return undefined;
    const matches = [...contents.commits.keys()].filter((sha) => sha.startsWith(ref.toLowerCase()));
    return matches.length === 1 ? matches[0] : undefined;
  }

  #getCommit(
    owner: string,
    name: string,
    ref: string,
    authorization: string | undefined,
    accept: string | undefined,
  ): Answer {
    const repo = this.#visibleRepository(owner, name, authorization);
    if ('status' in repo) return repo;
    const contents = this.#contents.get(`${repo.owner}/${repo.name}`.toLowerCase());
    if (contents === undefined)
      return { status: 409, body: { message: 'Git Repository is empty.', documentation_url: DOCS } };
    const sha = this.#resolveRef(contents, ref);
    if (sha === undefined)
      return { status: 422, body: { message: `No commit found for SHA: ${ref}`, documentation_url: DOCS } };
    // `application/vnd.github.sha` (Octokit sends `vnd.github.v3.sha`): the sha alone, as text.
    if (/application\/vnd\.github(?:\.v3)?\.sha/.test(accept ?? '')) {
      return { status: 200, raw: sha, headers: { 'content-type': 'application/vnd.github.sha; charset=utf-8' } };
    }
    return {
      status: 200,
      body: {
        sha,
        node_id: `C_${sha.slice(0, 12)}`,
        commit: { message: 'fake commit', tree: { sha: createHash('sha1').update(sha).digest('hex') } },
        url: `${this.url}/repos/${repo.owner}/${repo.name}/commits/${sha}`,
        html_url: `${this.#origin}/${repo.owner}/${repo.name}/commit/${sha}`,
        files: [],
      },
    };
  }

  /** GitHub's `POST /repos/{owner}/{repo}/statuses/{sha}`: 201 with the status, or its errors. */
  #createStatus(owner: string, name: string, sha: string, authorization: string | undefined, body: Buffer): Answer {
    const token = /^(?:token|bearer)\s+(\S+)$/i.exec(authorization ?? '')?.[1];
    if (token === undefined)
      return { status: 401, body: { message: 'Requires authentication', documentation_url: DOCS } };
    const repo = this.#visibleRepository(owner, name, authorization);
    if ('status' in repo) return repo;
    if (this.options.readOnlyTokens?.includes(token))
      return {
        status: 403,
        body: { message: 'Resource not accessible by personal access token', documentation_url: DOCS },
      };
    let input: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(body.toString('utf8'));
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not an object');
      input = parsed as Record<string, unknown>;
    } catch {
      return { status: 400, body: { message: 'Problems parsing JSON', documentation_url: DOCS } };
    }
    const invalid = (field: string, message: string): Answer => ({
      status: 422,
      body: {
        message: 'Validation Failed',
        errors: [{ resource: 'Status', code: 'custom', field, message }],
        documentation_url: DOCS,
      },
    });
    const states = ['error', 'failure', 'pending', 'success'] as const;
    const state = states.find((s) => s === input.state);
    if (state === undefined) return invalid('state', 'state is not included in the list');
    if (input.description !== undefined && input.description !== null && typeof input.description !== 'string')
      return invalid('description', 'description is not a string');
    if (typeof input.description === 'string' && input.description.length > 140)
      return invalid('description', 'description is too long (maximum is 140 characters)');
    if (input.target_url !== undefined && input.target_url !== null && typeof input.target_url !== 'string')
      return invalid('target_url', 'target_url is not a string');
    const contents = this.#contents.get(`${repo.owner}/${repo.name}`.toLowerCase());
    const full = /^[0-9a-f]{40}$/.test(sha) && contents?.commits.has(sha) === true;
    if (!full) return { status: 422, body: { message: `No commit found for SHA: ${sha}`, documentation_url: DOCS } };
    const recorded: RecordedCommitStatus = {
      owner: repo.owner,
      repo: repo.name,
      sha,
      state,
      target_url: typeof input.target_url === 'string' ? input.target_url : null,
      description: typeof input.description === 'string' ? input.description : null,
      context: typeof input.context === 'string' && input.context !== '' ? input.context : 'default',
    };
    this.statuses.push(recorded);
    const id = this.statuses.length;
    const at = new Date(this.#now()).toISOString().replace(/\.\d{3}Z$/, 'Z');
    return {
      status: 201,
      body: {
        url: `${this.url}/repos/${repo.owner}/${repo.name}/statuses/${sha}`,
        avatar_url: null,
        id,
        node_id: `SC_${id}`,
        state,
        description: recorded.description,
        target_url: recorded.target_url,
        context: recorded.context,
        created_at: at,
        updated_at: at,
        creator: { login: 'slipway-bot', id: 1, type: 'User' },
      },
    };
  }

  #redirectToTarball(owner: string, name: string, ref: string, authorization: string | undefined): Answer {
    const repo = this.#visibleRepository(owner, name, authorization);
    if ('status' in repo) return repo;
    const contents = this.#contents.get(`${repo.owner}/${repo.name}`.toLowerCase());
    const sha = contents === undefined ? undefined : this.#resolveRef(contents, ref === '' ? repo.default_branch : ref);
    if (sha === undefined) return { status: 404, body: { message: 'Not Found', documentation_url: DOCS } };
    const token = randomBytes(12).toString('hex');
    this.#downloadTokens.add(token);
    return {
      status: 302,
      headers: { location: `${this.#origin}/_codeload/${repo.owner}/${repo.name}/legacy.tar.gz/${sha}?token=${token}` },
    };
  }

  async #codeload(owner: string, name: string, sha: string, url: URL): Promise<Answer> {
    const contents = this.#contents.get(`${owner}/${name}`.toLowerCase());
    const files = contents?.commits.get(sha);
    if (files === undefined || !this.#downloadTokens.has(url.searchParams.get('token') ?? '')) {
      return { status: 404, raw: '404: Not Found', headers: { 'content-type': 'text/plain; charset=utf-8' } };
    }
    const top = `${owner}-${name}-${sha.slice(0, 7)}`;
    const tarball = this.#tarballs.get(`${top}/${sha}`) ?? (await this.#buildTarball(top, sha, files));
    this.#tarballs.set(`${top}/${sha}`, tarball);
    return {
      status: 200,
      raw: tarball,
      headers: { 'content-type': 'application/x-gzip', 'content-disposition': `attachment; filename=${top}.tar.gz` },
    };
  }

  async #buildTarball(top: string, sha: string, files: Record<string, string>): Promise<Buffer> {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'fake-github-'));
    try {
      await fs.mkdir(path.join(dir, top));
      for (const [file, content] of Object.entries(files)) {
        const full = path.join(dir, top, file);
        await fs.mkdir(path.dirname(full), { recursive: true });
        await fs.writeFile(full, content);
      }
      const plain = path.join(dir, 'plain.tar');
      await tar.create({ file: plain, cwd: dir, portable: true }, [top]);
      // GitHub's tarballs open with a pax global header whose comment is the commit sha.
      const globalHeader = new tar.Pax({ comment: sha }, true).encode();
      return gzipSync(Buffer.concat([globalHeader, await fs.readFile(plain)]));
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }
}

export async function startFakeGitHub(options: FakeGitHubOptions = {}): Promise<FakeGitHub> {
  return new FakeGitHub(options).listen();
}
