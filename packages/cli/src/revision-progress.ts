/**
 * Following a new revision to its end for `slipway deploy` and `slipway rollback`: a progress display
 * of its states with its build log under it (from the service's event stream, not a poll), then the
 * stable URL on stdout, or the failure reason and the log's last lines and exit code 1.
 */
import type { Deployment, Revision, RevisionStatus } from '@slipway/sdk/api-aliases';
import type { SlipwayClient } from '@slipway/sdk/slipway-client';
import type { CliContext } from './cli-context.ts';
import { CliError, EXIT } from './cli-errors.ts';

const STEP: Record<RevisionStatus, string> = {
  CREATING: 'Creating the revision',
  QUEUED: 'Queued',
  AWAITING_BUILD: 'Fetching the source',
  BUILDING: 'Building',
  AWAITING_DEPLOY: 'Waiting to start',
  DEPLOYING: 'Starting and health-checking',
  DEPLOYED: 'Deployed',
  CREATE_FAILED: 'Creation failed',
  BUILD_FAILED: 'Build failed',
  DEPLOY_FAILED: 'Deploy failed',
  SKIPPED: 'Skipped: a newer revision was queued',
  INTERRUPTED: 'Interrupted',
  UNKNOWN: 'Lost track of by the data plane',
};

/** Lines of the deploy log shown under a failure. */
const TAIL_LINES = 20;
/** Lines of the followed log remembered, so that a failure message does not print them again. */
const SHOWN_LINES_KEPT = 200;

export interface FollowResult {
  deployment: Deployment;
  revision: Revision;
  url: string | null;
}

export async function followRevision(
  ctx: CliContext,
  client: SlipwayClient,
  deployment: Deployment,
  revisionId: string,
): Promise<FollowResult> {
  const { output } = ctx;
  const started = Date.now();
  const label = (status: RevisionStatus) =>
    `${STEP[status]} (revision ${revisionId.slice(0, 8)}, ${Math.round((Date.now() - started) / 1000)} s)`;
  const progress = output.progress(`Following revision ${revisionId} of ${deployment.name}`);
  let status: RevisionStatus | null = null;
  // The spinner's elapsed time moves on between events.
  const ticker = output.interactive ? setInterval(() => status && progress.update(label(status)), 1000) : null;
  const tail: string[] = [];
  let revision: Revision;
  try {
    revision = await client.waitForRevision(deployment.id, revisionId, {
      onStatus: (next) => {
        status = next;
        progress.update(output.interactive ? label(next) : `${next}: ${STEP[next]}`);
      },
      onLine: (line) => {
        tail.push(line.message);
        if (tail.length > SHOWN_LINES_KEPT) tail.shift();
        progress.line(line.stream === 'system' ? output.err.dim(line.message) : line.message);
      },
    });
  } catch (error) {
    progress.stop();
    throw error;
  } finally {
    if (ticker) clearInterval(ticker);
  }

  if (revision.status === 'DEPLOYED') {
    const current = await client.deployments.get(deployment.id);
    const url = current.source_config.custom_url ?? null;
    progress.succeed(
      `Deployed ${deployment.name} (revision ${revision.id}) in ${Math.round((Date.now() - started) / 1000)} s`,
    );
    return { deployment: current, revision, url };
  }

  // The error printed by main says what failed; the spinner just goes away.
  progress.stop();
  // Each thing is said once: the build log was printed as it came, so neither its last lines nor a
  // failure message that is one of them is repeated. A failure while starting has its lines in the
  // deploy log, which was not shown; the failure message usually quotes the last of them already,
  // so they are printed only when it does not.
  const details: string[] = [];
  const message = revision.failure_message?.trim() ?? '';
  details.push(...unseenLines(message, tail));
  const lines = revision.status === 'DEPLOY_FAILED' ? await deployLogTail(client, deployment.id, revision.id) : [];
  const lastLine = lines.at(-1);
  if (lines.length > 0 && (lastLine === undefined || !message.includes(lastLine))) {
    details.push('Last lines of the deploy log:', ...lines.map((line) => `  ${line}`));
  }
  details.push(
    `Logs: slipway logs ${deployment.name} --revision ${revision.id}${revision.status === 'DEPLOY_FAILED' ? '' : ' --build'}`,
  );
  throw new CliError(
    `${STEP[revision.status]}: revision ${revision.id} of ${deployment.name} ended ${revision.status}${revision.failure_reason ? ` (${revision.failure_reason})` : ''}`,
    EXIT.failed,
    details,
  );
}

/**
 * The lines of a failure message not shown yet: a line the followed log had (the data plane logs
 * "Build failed: <first line>", and quotes the log's last lines in the message) is left out, and so is
 * a heading ("Last lines of output:") whose lines were all left out.
 */
function unseenLines(message: string, shownLog: string[]): string[] {
  if (message === '') return [];
  const shown = shownLog.flatMap((line) => line.split('\n')).map((line) => line.trim());
  const seen = (line: string) =>
    line.trim() === '' || shown.some((s) => s === line.trim() || s.endsWith(`: ${line.trim()}`));
  const kept = message.split('\n').filter((line) => !seen(line));
  while (kept.length > 0 && kept.at(-1)!.trim().endsWith(':')) kept.pop();
  return kept;
}

async function deployLogTail(client: SlipwayClient, deploymentId: string, revisionId: string): Promise<string[]> {
  const lines: string[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await client.logs.page(deploymentId, revisionId, {
      type: 'deploy',
      limit: 1000,
      ...(cursor ? { cursor } : {}),
    });
    lines.push(...page.lines.map((line) => line.message));
    lines.splice(0, Math.max(0, lines.length - TAIL_LINES));
    if (page.lines.length < 1000) return lines;
    cursor = page.next_cursor;
  }
}

/** Prints what a finished deploy or rollback gives the user: the URL (or the JSON of it all). */
export function printDeployed(ctx: CliContext, result: FollowResult): void {
  if (ctx.output.json) {
    ctx.output.data({ deployment: result.deployment, revision: result.revision, url: result.url });
    return;
  }
  if (result.url) ctx.output.result(result.url);
  else ctx.output.note(`${result.deployment.name} has no URL on this service (it runs on a listener's cluster).`);
}
