/**
 * Talking to an integration's code host on behalf of deployments and the data plane (docs/codehost.md):
 * checking a repository URL and downloading a repository's source at a ref, and the one mapping from a
 * host's failure to an answer (`codehostFailure`), used by every call to a host.
 */
import { CodeHostError } from '../codehost/codehost-error.ts';
import { CodeHostNotFoundError, type GitHubClient, type RepositoryUrlCheck } from '../codehost/github-client.ts';
import { parseRepositoryUrl, webOriginOfApiUrl } from '../codehost/repository-url.ts';
import { AppError } from '../errors.ts';
import type { CodehostIntegrationRow } from '../store/schema.ts';
import type { RepositoryChecker } from './deployments.ts';

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

export async function talkingToHost<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    // Something the user named is not there: their configuration to fix, not the host's failure.
    if (error instanceof CodeHostNotFoundError) throw new AppError('invalid_reference', error.message);
    if (error instanceof CodeHostError) throw codehostFailure(error);
    throw error;
  }
}

/**
 * What deployments and the data plane ask of an integration's host: whether a repository URL is there,
 * and a repository's source at a ref. `clientOf` gives the integration's client (its host checked
 * against the allow-list).
 */
export function createRepositorySource(
  clientOf: (row: CodehostIntegrationRow) => GitHubClient,
): RepositoryChecker & RepositorySource {
  return {
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
}
