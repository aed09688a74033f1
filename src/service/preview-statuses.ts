/**
 * The commit statuses of pull-request previews (docs/codehost.md, "Pull-request previews"): each preview's
 * state goes back to its pull request through the code host's API (GitHub `POST
 * /repos/{owner}/{repo}/statuses/{sha}`), under the context `slipway/<deployment name>`:
 *
 * - pending: the head commit's revision is being built or started (target_url: where it will answer);
 * - success: the own data plane serves it at its endpoint (target_url: the preview's URL);
 * - failure: its build or start failed, or the preview was refused (over the limit, previews off).
 *
 * The state is derived from the rows (the preview, its revision, its endpoint, the endpoint's failure
 * event), never kept beside them; what was last posted is kept on the preview, so each state is posted
 * once per commit. A post that fails (the host down, a token without the permission) is tried again with
 * a growing delay. One poster runs per API process; two replicas may post the same state twice, which
 * the code host takes as the same status.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { NOT_TO_RUN } from '../domain/desired-state.ts';
import { previewEndpointName } from '../codehost/pull-request-event.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { recordEvents } from '../store/events.ts';
import { getIntegrationById } from '../store/codehost-integrations.ts';
import { markStatusFailed, markStatusPosted, previewsWithStatusFacts } from '../store/pull-request-previews.ts';
import type { RevisionStatus } from '../domain/states.ts';
import type { CommitStatusState, Database } from '../store/schema.ts';
import type { CodehostIntegrationService } from './codehost-integrations.ts';
import { endpointUrl } from './deployment-endpoints.ts';

/** What a preview's pull request should show. */
export interface WantedStatus {
  state: CommitStatusState;
  description: string;
  targetUrl: string | null;
}

/** The facts a status is derived from. */
export interface PreviewStatusFacts {
  refusedMessage: string | null;
  revisionId: string | null;
  revisionStatus: RevisionStatus | null;
  revisionFailureMessage: string | null;
  servedRevisionId: string | null;
  endpointFailureMessage: string | null;
  url: string | null;
}

/** The status a preview should show; null when there is nothing to say (no revision yet). Pure. */
export function wantedStatus(facts: PreviewStatusFacts): WantedStatus | null {
  if (facts.refusedMessage !== null) return { state: 'failure', description: facts.refusedMessage, targetUrl: null };
  if (facts.revisionId === null || facts.revisionStatus === null) return null;
  if (NOT_TO_RUN.has(facts.revisionStatus))
    return {
      state: 'failure',
      description: `Preview ${facts.revisionStatus}: ${facts.revisionFailureMessage ?? 'see the revision logs'}`,
      targetUrl: null,
    };
  if (facts.servedRevisionId === facts.revisionId)
    return { state: 'success', description: `Preview ready at ${facts.url ?? 'its endpoint'}`, targetUrl: facts.url };
  if (facts.endpointFailureMessage !== null)
    return {
      state: 'failure',
      description: `Preview did not start: ${facts.endpointFailureMessage}`,
      targetUrl: null,
    };
  return {
    state: 'pending',
    description: facts.revisionStatus === 'DEPLOYED' ? 'Starting the preview' : 'Building the preview',
    targetUrl: facts.url,
  };
}

/** After n failed posts, the next is tried this much later (5 s doubling, at most 10 minutes). */
const retryDelayMs = (attempts: number): number => Math.min(5_000 * 2 ** (attempts - 1), 10 * 60_000);

export interface PreviewStatusPosterDeps {
  db: Kysely<Database>;
  integrations: Pick<CodehostIntegrationService, 'postCommitStatus'>;
  logger: Pick<Logger, 'warn' | 'error'>;
  now?: () => Date;
}

export function createPreviewStatusPoster({
  db,
  integrations,
  logger,
  now = () => new Date(),
}: PreviewStatusPosterDeps) {
  /** Posts every status that changed since it was last posted; returns how many were posted. */
  async function postDue(): Promise<number> {
    let posted = 0;
    for (const row of await previewsWithStatusFacts(db, now())) {
      const name = previewEndpointName(row.pull_request);
      const wanted = wantedStatus({
        refusedMessage: row.refused_message,
        revisionId: row.revision_id,
        revisionStatus: row.revision_status,
        revisionFailureMessage: row.revision_failure_message,
        servedRevisionId: row.served_revision_id,
        endpointFailureMessage: row.endpoint_failure_message,
        url: endpointUrl({ app_slug: row.app_slug, source_config: row.source_config }, name),
      });
      if (wanted === null) continue;
      if (row.status_state === wanted.state && row.status_sha === row.head_sha) continue;
      const integrationId = row.source_config.integration_id;
      const integration = typeof integrationId === 'string' ? await getIntegrationById(db, integrationId) : undefined;
      if (!integration || integration.workspace_id !== row.workspace_id) continue;
      try {
        await integrations.postCommitStatus(integration, row.repository, row.head_sha, {
          state: wanted.state,
          target_url: wanted.targetUrl,
          description: wanted.description,
          context: `slipway/${row.deployment_name}`,
        });
      } catch (error) {
        const attempts = row.status_attempts + 1;
        await markStatusFailed(
          db,
          row.deployment_id,
          row.pull_request,
          attempts,
          new Date(now().getTime() + retryDelayMs(attempts)),
        );
        logger.warn(
          { err: error, deploymentId: row.deployment_id, pullRequest: row.pull_request, attempts },
          'could not post a preview commit status; trying again later',
        );
        continue;
      }
      await db.transaction().execute(async (tx) => {
        await markStatusPosted(tx, row.deployment_id, row.pull_request, row.head_sha, wanted.state);
        await recordEvents(tx, [
          {
            workspaceId: row.workspace_id,
            subjectType: 'deployment',
            subjectId: row.deployment_id,
            deploymentId: row.deployment_id,
            type: 'deployment.preview_status_posted',
            data: {
              pull_request: row.pull_request,
              sha: row.head_sha,
              state: wanted.state,
              target_url: wanted.targetUrl,
            },
          },
        ]);
      });
      posted += 1;
    }
    return posted;
  }
  return { postDue };
}

export type PreviewStatusPoster = ReturnType<typeof createPreviewStatusPoster>;

/**
 * Runs the poster when a revision or an endpoint changes (the change feed), and every `intervalMs` as the
 * safety net and for retries; one pass at a time.
 */
export function startPreviewStatusPoster(options: {
  poster: PreviewStatusPoster;
  changes: ChangeFeed | null;
  logger: Pick<Logger, 'error'>;
  intervalMs?: number;
}): { stop(): Promise<void> } {
  const { poster, changes, logger } = options;
  let running: Promise<void> | null = null;
  let again = false;
  let stopped = false;
  const wake = (): void => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = poster
      .postDue()
      .then(
        () => undefined,
        (error: unknown) => logger.error({ err: error }, 'preview commit statuses failed; the next pass retries'),
      )
      .finally(() => {
        running = null;
        if (again) {
          again = false;
          wake();
        }
      });
  };
  const unsubscribe = changes?.subscribe((change) => {
    if (change.kind === 'revision' || change.kind === 'deployment' || change.kind === 'reconnected') wake();
  });
  const timer = setInterval(wake, options.intervalMs ?? 5_000);
  timer.unref();
  wake();
  return {
    async stop() {
      stopped = true;
      unsubscribe?.();
      clearInterval(timer);
      await running;
    },
  };
}
