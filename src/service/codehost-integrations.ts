/**
 * Code-host integrations (docs/codehost.md): create, read and delete them, list the repositories they reach, check a
 * repository URL for a codehost deployment, and download a repository at a ref for the data plane. Credentials and the webhook secret are sealed with
 * the SecretBox before they are stored and opened only to talk to the host or to check a signature;
 * they appear in no response, log line or error message.
 *
 * Failures of the host arrive as CodeHostError and leave as AppError (`codehostFailure`, in
 * codehost-repository-source.ts), so the one error handler answers them like any other error.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { GitHubClientCache } from '../codehost/github-client-cache.ts';
import {
  GITHUB_API_URL,
  GitHubClient,
  type CodeHostCredentials,
  type CodeHostRepository,
  type GitHubClientOptions,
} from '../codehost/github-client.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, notFound } from '../errors.ts';
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
import {
  checkAllowedApiUrl,
  checkApiUrl,
  checkApiUrlUnchanged,
  checkCredentials,
  given,
  newWebhookSecret,
  webhookSecretOfNew,
  type CreateIntegrationInput,
  type HostPolicy,
  type UpdateIntegrationInput,
} from './codehost-integration-input.ts';
import { createRepositorySource, talkingToHost } from './codehost-repository-source.ts';
import type { WriteConditions } from './preconditions.ts';

export type { CreateIntegrationInput, HostPolicy, UpdateIntegrationInput } from './codehost-integration-input.ts';
export type { RepositorySource } from './codehost-repository-source.ts';

/** A repository as the interface lists it: exactly these six fields. */
export interface ListedRepository extends CodeHostRepository {
  host_integration_id: string;
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

/** Stores a checked integration with its event; 409 when its name is taken in the workspace. */
async function insertWithEvent(
  db: Kysely<Database>,
  values: Parameters<typeof insertIntegration>[1],
): Promise<CodehostIntegrationRow> {
  const { id, workspaceId, name, apiUrl, kind } = values;
  return db.transaction().execute(async (tx) => {
    const created = await insertIntegration(tx, values);
    if (!created) throw new AppError('conflict', `An integration named '${name}' already exists in this workspace.`);
    await recordEvents(tx, [
      {
        workspaceId,
        subjectType: 'codehost_integration',
        subjectId: id,
        type: 'codehost_integration.created',
        data: { name, api_url: apiUrl, kind },
      },
    ]);
    return created;
  });
}

/**
 * Applies a checked change with its event (the names of the changed fields, never their values), under
 * the integration's lock and the write's preconditions; nothing changes when no field does.
 */
async function updateWithEvent(
  db: Kysely<Database>,
  { workspaceId, id, change, fields }: { workspaceId: string; id: string; change: IntegrationChange; fields: string[] },
  conditions: WriteConditions,
): Promise<CodehostIntegrationRow> {
  return db.transaction().execute(async (tx) => {
    const locked = await lockIntegration(tx, workspaceId, id);
    if (!locked) throw notFound('Integration', id);
    await conditions.precondition?.(tx);
    if (fields.length === 0) return locked;
    const updated = await updateIntegration(tx, id, change);
    if (!updated)
      throw new AppError('conflict', `An integration named '${String(change.name)}' already exists in this workspace.`);
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
}

/**
 * The clients' options with their log: Octokit's per-request lines are debug noise; only the message is
 * passed on, never the request options that come as a second argument (they hold the Authorization header).
 */
function withClientLog(
  logger: Logger,
  clientOptions: Omit<GitHubClientOptions, 'apiUrl'>,
): Omit<GitHubClientOptions, 'apiUrl'> {
  const log = logger.child({ component: 'codehost' });
  return {
    log: {
      debug: (message: string) => log.debug(message),
      info: (message: string) => log.debug(message),
      warn: (message: string) => log.warn(message),
      error: (message: string) => log.error(message),
    },
    ...clientOptions,
  };
}

/** The stored fields of checked credentials: the kind and an App's ids in clear, the credentials sealed. */
function credentialsChange(credentials: CodeHostCredentials, secretBox: SecretBox): IntegrationChange {
  const app = 'app_id' in credentials;
  return {
    kind: app ? 'app' : 'token',
    appId: app ? String(credentials.app_id) : null,
    installationId: app ? String(credentials.installation_id) : null,
    credentialsSealed: secretBox.seal(JSON.stringify(credentials)),
  };
}

export function createCodehostIntegrationService({
  db,
  secretBox,
  allowInsecure,
  allowedApiUrls,
  logger,
  clientOptions = {},
}: CodehostIntegrationServiceDeps) {
  const clientOptionsWithLog = withClientLog(logger, clientOptions);
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

  const repositories = createRepositorySource(clientOf);

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
      const webhookSecret = webhookSecretOfNew(input);
      const id = randomUUID();
      const kind = 'app_id' in credentials ? 'app' : 'token';
      // The checked client is cached under the new id, so its installation token serves the first listing.
      const client = clients.forIntegration({ id, apiUrl, credentials });
      try {
        await talkingToHost(() => client.verifyCredentials());
        const row = await insertWithEvent(db, {
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
      checkApiUrlUnchanged(input, current.api_url);
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
        Object.assign(change, credentialsChange(credentials, secretBox));
        fields.push('credentials');
      }
      const webhookSecret = newWebhookSecret(input);
      if (webhookSecret !== null) {
        change.webhookSecretSealed = secretBox.seal(webhookSecret);
        fields.push('webhook_secret');
      }
      const row = await updateWithEvent(db, { workspaceId, id, change, fields }, conditions);
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
