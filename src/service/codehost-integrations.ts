/**
 * Code-host integrations (docs/codehost.md): create, read and delete them, list the repositories they reach, check a
 * repository URL for a codehost deployment, and download a repository at a ref for the data plane. Credentials and the webhook secret are sealed with
 * the SecretBox before they are stored and opened only to talk to the host or to check a signature;
 * they appear in no response, log line or error message.
 *
 * Failures of the host arrive as CodeHostError and leave here as AppError (`codehostFailure`), so the
 * one error handler answers them like any other error.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { CodeHostError } from '../codehost/codehost-error.ts';
import { GitHubClientCache } from '../codehost/github-client-cache.ts';
import {
  CodeHostNotFoundError,
  GITHUB_API_URL,
  GitHubClient,
  type CodeHostCredentials,
  type CodeHostRepository,
  type GitHubClientOptions,
  type RepositoryUrlCheck,
} from '../codehost/github-client.ts';
import { isAllowedApiUrl, notAllowedMessage } from '../codehost/allowed-urls.ts';
import { parseRepositoryUrl, webOriginOfApiUrl } from '../codehost/repository-url.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, ValidationError, notFound } from '../errors.ts';
import {
  deleteIntegration,
  deploymentsUsingIntegration,
  getIntegration,
  insertIntegration,
  listIntegrations,
  lockIntegration,
  updateIntegration,
  type IntegrationChange,
} from '../store/codehost-integrations.ts';
import { recordEvents } from '../store/events.ts';
import type { CodehostIntegrationRow, Database, Db } from '../store/schema.ts';
import type { RepositoryChecker } from './deployments.ts';
import type { WriteConditions } from './preconditions.ts';

/** A repository as the interface lists it: exactly these six fields. */
export interface ListedRepository extends CodeHostRepository {
  host_integration_id: string;
}

export interface CreateIntegrationInput {
  name: string;
  api_url?: string | null;
  /** The secret fields are `unknown`: the route leaves them out of its schema so that a 422 never echoes them. */
  token?: unknown;
  app_id?: string | number | null;
  private_key?: unknown;
  installation_id?: string | number | null;
  webhook_secret?: unknown;
}

export interface UpdateIntegrationInput {
  name?: string | null;
  /** Cannot change: the deployments' repo_url were checked against this host. The same value is fine. */
  api_url?: unknown;
  token?: unknown;
  app_id?: string | number | null;
  private_key?: unknown;
  installation_id?: string | number | null;
  webhook_secret?: unknown;
  /** Generate a new webhook secret, returned once. */
  rotate_webhook_secret?: boolean | null;
}

/** What the data plane needs of an integration: a repository's source at a ref. */
export interface RepositorySource {
  /**
   * Resolves `ref` (a branch, a tag, `refs/heads/…`, `refs/tags/…` or a commit sha) in the repository at
   * `repoUrl` to a commit, and writes the gzipped tarball of exactly that commit to `destFile` (entries under
   * one `owner-repo-shortsha/` directory, as GitHub makes them). Throws AppError: `invalid_reference` when
   * the ref or the repository does not exist (or repoUrl is not on the integration's host), and the codes of
   * codehostFailure when the host refuses or fails.
   */
  downloadSource(
    integration: CodehostIntegrationRow,
    repoUrl: string,
    ref: string,
    destFile: string,
  ): Promise<{ commitSha: string }>;
}

export interface CodehostIntegrationServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  /** Plain-http API URLs, for development and tests (SLIPWAY_ALLOW_INSECURE_CODEHOST). */
  allowInsecure: boolean;
  /**
   * The code hosts the service may connect to (SLIPWAY_CODEHOST_ALLOWED_URLS, see src/codehost/allowed-urls.ts).
   * When given, every connection to an integration's host is checked against it, stored integrations
   * included (an operator may shorten the list). Create and update also take it per call.
   */
  allowedApiUrls?: readonly string[];
  logger: Logger;
  /** Timeouts, retries and clock of every client; tests turn retries down. */
  clientOptions?: Omit<GitHubClientOptions, 'apiUrl'>;
}

const TOKEN_MAX = 1024;
const PRIVATE_KEY_MAX = 16 * 1024;
const WEBHOOK_SECRET_MIN = 16;
const WEBHOOK_SECRET_MAX = 256;

/** The one mapping from a host failure to an answer (docs/codehost.md, "Errors"). */
function codehostFailure(error: CodeHostError): AppError {
  const retryAfter = { retryAfterSeconds: error.retryAfterSeconds };
  switch (error.kind) {
    case 'rejected':
      return new AppError('codehost_rejected', error.message);
    case 'rate_limited':
      return new AppError('unavailable', error.message, retryAfter);
    case 'unavailable':
      // A host that said when to come back is answered as "retry later", one that did not as a bad gateway.
      return error.retryAfterSeconds === undefined
        ? new AppError('bad_gateway', error.message)
        : new AppError('unavailable', error.message, retryAfter);
    case 'unexpected':
      return new AppError('bad_gateway', error.message);
  }
}

async function talkingToHost<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    // Something the user named is not there: their configuration to fix, not the host's failure.
    if (error instanceof CodeHostNotFoundError) throw new AppError('invalid_reference', error.message);
    if (error instanceof CodeHostError) throw codehostFailure(error);
    throw error;
  }
}

/** A 422 item that names the field but, unlike schema errors, never echoes the value: it is a secret. */
function secretFieldError(field: string, msg: string): ValidationError {
  return new ValidationError([{ type: 'secret_invalid', loc: ['body', field], msg }]);
}

function secretString(value: unknown, field: string, min: number, max: number, noSpaces: boolean): string {
  const ok = typeof value === 'string' && value.length >= min && value.length <= max && !(noSpaces && /\s/.test(value));
  if (!ok) {
    throw secretFieldError(
      field,
      `Input should be a string of ${min} to ${max} characters${noSpaces ? ' without spaces' : ''} (the value is not shown: it is a secret)`,
    );
  }
  return value;
}

const given = (value: unknown): boolean => value !== undefined && value !== null;

/** api_url: https (http only when allowed), no credentials, query or fragment; trailing slashes dropped. */
function checkApiUrl(raw: string, allowInsecure: boolean): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new AppError('invalid_request', 'api_url is not a valid URL');
  }
  if (url.protocol !== 'https:' && !(allowInsecure && url.protocol === 'http:')) {
    throw new AppError(
      'invalid_request',
      allowInsecure
        ? 'api_url must be an http or https URL'
        : 'api_url must be an https URL (plain http is accepted only when the service runs with SLIPWAY_ALLOW_INSECURE_CODEHOST=1)',
    );
  }
  if (url.username !== '' || url.password !== '')
    throw new AppError(
      'invalid_request',
      'api_url must not carry credentials; give them as token or app_id, private_key and installation_id',
    );
  if (url.search !== '' || url.hash !== '')
    throw new AppError('invalid_request', 'api_url must not have a query or a fragment');
  return `${url.origin}${url.pathname}`.replace(/\/+$/, '');
}

/** Either a token, or the three fields of a GitHub App installation; never both. */
function checkCredentials(
  input: Pick<CreateIntegrationInput, 'token' | 'app_id' | 'private_key' | 'installation_id'>,
): CodeHostCredentials {
  const appFields = (['app_id', 'private_key', 'installation_id'] as const).filter((f) => given(input[f]));
  if (given(input.token)) {
    if (appFields.length > 0) {
      throw new AppError(
        'invalid_request',
        `Give either token, or app_id, private_key and installation_id; not both (got token and ${appFields.join(', ')}).`,
      );
    }
    return { token: secretString(input.token, 'token', 1, TOKEN_MAX, true) };
  }
  if (appFields.length === 0) {
    throw new AppError(
      'field_required',
      'token is required (or, for a GitHub App, app_id, private_key and installation_id)',
    );
  }
  for (const field of ['app_id', 'private_key', 'installation_id'] as const) {
    if (!given(input[field])) throw new AppError('field_required', `${field} is required for a GitHub App integration`);
  }
  return {
    app_id: String(input.app_id),
    private_key: secretString(input.private_key, 'private_key', 1, PRIVATE_KEY_MAX, false),
    installation_id: String(input.installation_id),
  };
}

/** Which code hosts a write may make the service connect to: the operator's allow-list. */
export interface HostPolicy {
  allowedApiUrls?: readonly string[];
}

/** 400 naming the setting when `apiUrl` is off the list; no list, no limit. */
function checkAllowedApiUrl(apiUrl: string, allowed: readonly string[] | undefined): void {
  if (allowed !== undefined && !isAllowedApiUrl(apiUrl, allowed))
    throw new AppError('invalid_request', notAllowedMessage(apiUrl));
}

export function createCodehostIntegrationService({
  db,
  secretBox,
  allowInsecure,
  allowedApiUrls,
  logger,
  clientOptions = {},
}: CodehostIntegrationServiceDeps) {
  // Octokit's per-request lines are debug noise; only the message is passed on, never the request
  // options that come as a second argument (they hold the Authorization header).
  const log = logger.child({ component: 'codehost' });
  const clientOptionsWithLog: Omit<GitHubClientOptions, 'apiUrl'> = {
    log: {
      debug: (message: string) => log.debug(message),
      info: (message: string) => log.debug(message),
      warn: (message: string) => log.warn(message),
      error: (message: string) => log.error(message),
    },
    ...clientOptions,
  };
  const clients = new GitHubClientCache(clientOptionsWithLog);

  function credentialsOf(row: CodehostIntegrationRow): CodeHostCredentials {
    return JSON.parse(secretBox.open(row.credentials_encrypted)) as CodeHostCredentials;
  }

  function clientOf(row: CodehostIntegrationRow): GitHubClient {
    checkAllowedApiUrl(row.api_url, allowedApiUrls);
    return clients.forIntegration({ id: row.id, apiUrl: row.api_url, credentials: credentialsOf(row) });
  }

  /** The list a write is held to: the one it brings (from the route's configuration), else the service's. */
  const allowedFor = (policy: HostPolicy): readonly string[] | undefined => policy.allowedApiUrls ?? allowedApiUrls;

  async function read(workspaceId: string, id: string, from: Db = db): Promise<CodehostIntegrationRow> {
    const row = await getIntegration(from, workspaceId, id);
    if (!row) throw notFound('Integration', id);
    return row;
  }

  const repositories: RepositoryChecker & RepositorySource = {
    async checkRepositoryUrl(integration: CodehostIntegrationRow, repoUrl: string): Promise<RepositoryUrlCheck> {
      return talkingToHost(() => clientOf(integration).checkRepositoryUrl(repoUrl));
    },

    async downloadSource(
      integration: CodehostIntegrationRow,
      repoUrl: string,
      ref: string,
      destFile: string,
    ): Promise<{ commitSha: string }> {
      const client = clientOf(integration);
      // Checked when the deployment was made; checked again since the tarball must come from this host.
      const location = parseRepositoryUrl(repoUrl);
      if (location === null || location.origin !== webOriginOfApiUrl(client.apiUrl)) {
        throw new AppError(
          'invalid_reference',
          `The repository URL ${repoUrl} is not a repository on the integration's host ${webOriginOfApiUrl(client.apiUrl)}.`,
        );
      }
      return talkingToHost(async () => {
        // The sha first, then the tarball of that sha: a push between the two cannot mix commits.
        const commitSha = await client.resolveCommit(location.owner, location.name, ref);
        await client.downloadTarball(location.owner, location.name, commitSha, destFile);
        return { commitSha };
      });
    },
  };

  return {
    repositories,
    get: read,

    /** Sets a commit status through the integration (pull-request previews, src/service/preview-statuses.ts). */
    async postCommitStatus(
      integration: CodehostIntegrationRow,
      repository: string,
      sha: string,
      status: Parameters<GitHubClient['createCommitStatus']>[3],
    ): Promise<void> {
      const [owner, name] = repository.split('/');
      if (!owner || !name) throw new AppError('invalid_reference', `'${repository}' is not owner/name.`);
      await talkingToHost(() => clientOf(integration).createCommitStatus(owner, name, sha, status));
    },

    /**
     * Checks the credentials against the host before storing them (one request; for an App, also the
     * installation token exchange), so that a wrong token or an uninstalled App is reported now rather
     * than at the first listing. Returns the webhook secret in plaintext once, for the create response.
     */
    async create(
      workspaceId: string,
      input: CreateIntegrationInput,
      policy: HostPolicy = {},
    ): Promise<{ row: CodehostIntegrationRow; webhookSecret: string }> {
      const apiUrl = checkApiUrl(input.api_url ?? GITHUB_API_URL, allowInsecure);
      // Before anything connects: the check of the credentials below is a request to apiUrl.
      checkAllowedApiUrl(apiUrl, allowedFor(policy));
      const credentials = checkCredentials(input);
      const webhookSecret = given(input.webhook_secret)
        ? secretString(input.webhook_secret, 'webhook_secret', WEBHOOK_SECRET_MIN, WEBHOOK_SECRET_MAX, false)
        : randomBytes(32).toString('hex');
      const id = randomUUID();
      const kind = 'app_id' in credentials ? 'app' : 'token';
      // The checked client is cached under the new id, so its installation token serves the first listing.
      const client = clients.forIntegration({ id, apiUrl, credentials });
      try {
        await talkingToHost(() => client.verifyCredentials());
        const row = await db.transaction().execute(async (tx) => {
          const created = await insertIntegration(tx, {
            id,
            workspaceId,
            name: input.name,
            apiUrl,
            kind,
            appId: 'app_id' in credentials ? String(credentials.app_id) : null,
            installationId: 'app_id' in credentials ? String(credentials.installation_id) : null,
            credentialsSealed: secretBox.seal(JSON.stringify(credentials)),
            webhookSecretSealed: secretBox.seal(webhookSecret),
          });
          if (!created)
            throw new AppError('conflict', `An integration named '${input.name}' already exists in this workspace.`);
          await recordEvents(tx, [
            {
              workspaceId,
              subjectType: 'codehost_integration',
              subjectId: id,
              type: 'codehost_integration.created',
              data: { name: input.name, api_url: apiUrl, kind },
            },
          ]);
          return created;
        });
        return { row, webhookSecret };
      } catch (error) {
        // A client cached for an integration that was not stored would only take room.
        clients.evict(id);
        throw error;
      }
    },

    /**
     * Renames, replaces the credentials (checked against the host like at create: a token expires, an
     * App key is rotated) or sets a new webhook secret, returned once. The host cannot change.
     */
    async update(
      workspaceId: string,
      id: string,
      input: UpdateIntegrationInput,
      policy: HostPolicy = {},
      conditions: WriteConditions = {},
    ): Promise<{ row: CodehostIntegrationRow; webhookSecret: string | null }> {
      const current = await read(workspaceId, id);
      if (given(input.api_url)) {
        const asked = typeof input.api_url === 'string' ? checkApiUrl(input.api_url, true) : null;
        if (asked !== current.api_url)
          throw new AppError(
            'field_immutable',
            'api_url cannot be changed after creation; create another integration for another host',
          );
      }
      const change: IntegrationChange = {};
      const fields: string[] = [];
      if (given(input.name) && input.name !== current.name) {
        change.name = input.name as string;
        fields.push('name');
      }
      const replacesCredentials = (['token', 'app_id', 'private_key', 'installation_id'] as const).some((f) =>
        given(input[f]),
      );
      if (replacesCredentials) {
        const credentials = checkCredentials(input);
        checkAllowedApiUrl(current.api_url, allowedFor(policy));
        // A client of its own: the cached one must keep serving the stored credentials until they change.
        await talkingToHost(() =>
          new GitHubClient(credentials, { ...clientOptionsWithLog, apiUrl: current.api_url }).verifyCredentials(),
        );
        const app = 'app_id' in credentials;
        Object.assign(change, {
          kind: app ? 'app' : 'token',
          appId: app ? String(credentials.app_id) : null,
          installationId: app ? String(credentials.installation_id) : null,
          credentialsSealed: secretBox.seal(JSON.stringify(credentials)),
        });
        fields.push('credentials');
      }
      if (given(input.webhook_secret) && input.rotate_webhook_secret === true) {
        throw new AppError('invalid_request', 'Give either webhook_secret or rotate_webhook_secret, not both.');
      }
      let webhookSecret: string | null = null;
      if (given(input.webhook_secret))
        webhookSecret = secretString(
          input.webhook_secret,
          'webhook_secret',
          WEBHOOK_SECRET_MIN,
          WEBHOOK_SECRET_MAX,
          false,
        );
      if (input.rotate_webhook_secret === true) webhookSecret = randomBytes(32).toString('hex');
      if (webhookSecret !== null) {
        change.webhookSecretSealed = secretBox.seal(webhookSecret);
        fields.push('webhook_secret');
      }
      const row = await db.transaction().execute(async (tx) => {
        const locked = await lockIntegration(tx, workspaceId, id);
        if (!locked) throw notFound('Integration', id);
        await conditions.precondition?.(tx);
        if (fields.length === 0) return locked;
        const updated = await updateIntegration(tx, id, change);
        if (!updated)
          throw new AppError(
            'conflict',
            `An integration named '${String(change.name)}' already exists in this workspace.`,
          );
        // The field names only, never their values.
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'codehost_integration',
            subjectId: id,
            type: 'codehost_integration.updated',
            data: { fields },
          },
        ]);
        return updated;
      });
      return { row, webhookSecret };
    },

    async list(workspaceId: string, limit: number, offset: number): Promise<CodehostIntegrationRow[]> {
      return listIntegrations(db, workspaceId, limit, offset);
    },

    /** 409 while a codehost deployment names the integration (it would lose its source). */
    async remove(workspaceId: string, id: string, conditions: WriteConditions = {}): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const row = await lockIntegration(tx, workspaceId, id);
        if (!row) throw notFound('Integration', id);
        await conditions.precondition?.(tx);
        const users = await deploymentsUsingIntegration(tx, id);
        if (users.length > 0) {
          throw new AppError(
            'conflict',
            `Integration ID ${id} is used by ${users.length} deployment(s), e.g. '${users[0]!.name}'; delete them first.`,
          );
        }
        await deleteIntegration(tx, id);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'codehost_integration',
            subjectId: id,
            type: 'codehost_integration.deleted',
            data: { name: row.name },
          },
        ]);
      });
      clients.evict(id);
    },

    /** Every repository the integration reaches, over all pages of the host's listing. */
    async listRepositories(workspaceId: string, id: string): Promise<ListedRepository[]> {
      const row = await read(workspaceId, id);
      const repos = await talkingToHost(() => clientOf(row).listRepositories());
      return repos.map((repo) => ({ ...repo, host_integration_id: row.id }));
    },

    /** The webhook secret, to check a delivery's signature. */
    webhookSecretOf(row: CodehostIntegrationRow): string {
      return secretBox.open(row.webhook_secret_encrypted);
    },
  };
}

export type CodehostIntegrationService = ReturnType<typeof createCodehostIntegrationService>;
