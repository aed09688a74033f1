/**
 * GitHub `pull_request` webhook payloads: validation of the fields a preview uses, and the pure decision
 * of what an action means for a preview (docs/codehost.md, "Pull-request previews"). Everything else in
 * the payload is ignored.
 */
import { parseRepositoryUrl, sameRepository } from './repository-url.ts';

export interface PullRequestEvent {
  action: string;
  number: number;
  /** The commit the pull request's branch points to. */
  headSha: string;
  /** `owner/name` of the repository the head branch lives in; null when the fork was deleted. */
  headRepository: string | null;
  /** The base repository, where the pull request is and where its statuses go. */
  repository: { full_name: string; html_url: string; clone_url: string };
  /** Its head lives in another repository than its base: the usual CI rule gives it no secrets. */
  fromFork: boolean;
}

export type PullRequestParse = { ok: true; event: PullRequestEvent } | { ok: false; message: string };

/** What a pull request's action does to its preview. */
export type PreviewAction = 'build' | 'remove' | 'none';

const COMMIT_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const FULL_NAME = /^[^/\s]+\/[^/\s]+$/;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function repositoryOf(
  value: unknown,
  field: string,
):
  | { ok: true; repo: PullRequestEvent['repository'] }
  | {
      ok: false;
      message: string;
    } {
  if (!isRecord(value)) return { ok: false, message: `${field} is required and must be an object.` };
  const { full_name: fullName, html_url: htmlUrl, clone_url: cloneUrl } = value;
  if (typeof fullName !== 'string' || !FULL_NAME.test(fullName) || fullName.includes('\u0000'))
    return { ok: false, message: `${field}.full_name is required and must be owner/name.` };
  if (typeof htmlUrl !== 'string' || parseRepositoryUrl(htmlUrl) === null)
    return { ok: false, message: `${field}.html_url is required and must be a repository URL.` };
  if (typeof cloneUrl !== 'string' || parseRepositoryUrl(cloneUrl) === null)
    return { ok: false, message: `${field}.clone_url is required and must be a repository URL.` };
  return { ok: true, repo: { full_name: fullName, html_url: htmlUrl, clone_url: cloneUrl } };
}

/** Validates a parsed `pull_request` payload; the message names the offending field. */
export function parsePullRequestEvent(payload: unknown): PullRequestParse {
  if (!isRecord(payload)) return { ok: false, message: 'The pull_request payload must be a JSON object.' };
  const { action, number, pull_request: pr } = payload;
  if (typeof action !== 'string' || !/^[a-z_]{1,40}$/.test(action))
    return { ok: false, message: 'action is required and must be a word such as opened.' };
  if (typeof number !== 'number' || !Number.isInteger(number) || number < 1 || number > 2_147_483_647)
    return { ok: false, message: 'number is required and must be a positive integer.' };
  if (!isRecord(pr)) return { ok: false, message: 'pull_request is required and must be an object.' };
  const { head, base } = pr;
  if (!isRecord(head) || typeof head.sha !== 'string' || !COMMIT_SHA.test(head.sha))
    return { ok: false, message: 'pull_request.head.sha is required and must be a commit SHA.' };
  if (!isRecord(base)) return { ok: false, message: 'pull_request.base is required and must be an object.' };
  const baseRepo = repositoryOf(base.repo, 'pull_request.base.repo');
  if (!baseRepo.ok) return baseRepo;
  let headRepository: string | null = null;
  let fromFork = true;
  if (head.repo !== null && head.repo !== undefined) {
    const headRepo = repositoryOf(head.repo, 'pull_request.head.repo');
    if (!headRepo.ok) return headRepo;
    headRepository = headRepo.repo.full_name;
    // The same repository by its URLs, not by a flag the sender sets: `fork` on the head repository says
    // only that it is some fork, not whose.
    fromFork =
      !sameRepository(headRepo.repo.html_url, baseRepo.repo.html_url) ||
      headRepo.repo.full_name.toLowerCase() !== baseRepo.repo.full_name.toLowerCase();
  }
  return {
    ok: true,
    event: { action, number, headSha: head.sha, headRepository, repository: baseRepo.repo, fromFork },
  };
}

/** opened, synchronize (a push to its branch) and reopened build; closed (merged or not) removes. */
export function previewAction(action: string): PreviewAction {
  if (action === 'opened' || action === 'synchronize' || action === 'reopened') return 'build';
  if (action === 'closed') return 'remove';
  return 'none';
}

/** The endpoint a pull request's preview is served at. */
export function previewEndpointName(number: number): string {
  return `pr-${number}`;
}
