/**
 * GitHub `push` webhook payloads: validation of the fields Slipway uses, and the pure decision of which
 * branch (if any) a push builds. Everything else in the payload is ignored.
 */
import { parseRepositoryUrl, sameRepository } from './repository-url.ts';

export interface PushEvent {
  /** Full ref, e.g. `refs/heads/main` or `refs/tags/v1`. */
  ref: string;
  /** The commit the ref points to after the push; all zeros when the ref was deleted. */
  after: string;
  deleted: boolean;
  repository: {
    /** `owner/name`. */
    full_name: string;
    html_url: string;
    clone_url: string;
  };
}

export type PushEventParse = { ok: true; event: PushEvent } | { ok: false; message: string };

/** What a push means for build-on-push deployments. */
export type PushTarget =
  | { kind: 'branch'; branch: string; commitSha: string }
  | { kind: 'ignored'; reason: 'tag' | 'branch_deleted' | 'other_ref'; message: string };

// SHA-1 object names, or SHA-256 ones for repositories using the newer object format.
const COMMIT_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const FULL_NAME = /^[^/\s]+\/[^/\s]+$/;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function nonEmptyString(value: unknown): value is string {
  return typeof value === 'string' && value.trim() !== '';
}

/** Validates a parsed push payload; the message names the offending field. */
export function parsePushEvent(payload: unknown): PushEventParse {
  if (!isRecord(payload)) return { ok: false, message: 'The push payload must be a JSON object.' };
  const { ref, after, deleted, repository } = payload;
  if (!nonEmptyString(ref) || !ref.startsWith('refs/')) {
    return { ok: false, message: 'ref is required and must be a full ref such as refs/heads/main.' };
  }
  if (typeof after !== 'string' || !COMMIT_SHA.test(after)) {
    return { ok: false, message: 'after is required and must be a commit SHA (40 or 64 lowercase hex digits).' };
  }
  if (deleted !== undefined && typeof deleted !== 'boolean') {
    return { ok: false, message: 'deleted must be a boolean.' };
  }
  if (!isRecord(repository)) return { ok: false, message: 'repository is required and must be an object.' };
  const { full_name: fullName, html_url: htmlUrl, clone_url: cloneUrl } = repository;
  if (!nonEmptyString(fullName) || !FULL_NAME.test(fullName)) {
    return { ok: false, message: 'repository.full_name is required and must be owner/name.' };
  }
  if (typeof htmlUrl !== 'string' || parseRepositoryUrl(htmlUrl) === null) {
    return { ok: false, message: 'repository.html_url is required and must be a repository URL.' };
  }
  if (typeof cloneUrl !== 'string' || parseRepositoryUrl(cloneUrl) === null) {
    return { ok: false, message: 'repository.clone_url is required and must be a repository URL.' };
  }
  return {
    ok: true,
    event: {
      ref,
      after,
      // GitHub always sends `deleted`; an older or third-party sender may not, and then the all-zero
      // `after` still tells a deletion.
      deleted: deleted === true || /^0+$/.test(after),
      repository: { full_name: fullName, html_url: htmlUrl, clone_url: cloneUrl },
    },
  };
}

/** `refs/heads/main` -> `main`, `refs/heads/feature/x` -> `feature/x`; tags and other refs -> null. */
export function branchOfRef(ref: string): string | null {
  const prefix = 'refs/heads/';
  if (!ref.startsWith(prefix) || ref.length === prefix.length) return null;
  return ref.slice(prefix.length);
}

/**
 * The branch a deployment's `repo_ref` tracks: `main` and `refs/heads/main` both track `main`; a tag
 * (`refs/tags/v1`) tracks no branch, so pushes never rebuild it.
 */
export function trackedBranch(repoRef: string): string | null {
  if (repoRef.startsWith('refs/')) return branchOfRef(repoRef);
  return repoRef === '' ? null : repoRef;
}

/** Which branch a push builds, or why it builds nothing. */
export function pushTarget(event: PushEvent): PushTarget {
  if (event.ref.startsWith('refs/tags/')) {
    return { kind: 'ignored', reason: 'tag', message: `${event.ref} is a tag; only branch pushes build.` };
  }
  const branch = branchOfRef(event.ref);
  if (branch === null) {
    return { kind: 'ignored', reason: 'other_ref', message: `${event.ref} is not a branch.` };
  }
  if (event.deleted) {
    return { kind: 'ignored', reason: 'branch_deleted', message: `Branch ${branch} was deleted.` };
  }
  return { kind: 'branch', branch, commitSha: event.after };
}

/** True when the push is for the repository a deployment's `repo_url` names (web or clone URL). */
export function pushIsForRepository(event: PushEvent, repoUrl: string): boolean {
  return sameRepository(event.repository.html_url, repoUrl) || sameRepository(event.repository.clone_url, repoUrl);
}
