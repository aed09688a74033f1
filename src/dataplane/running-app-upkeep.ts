/**
 * What the own worker keeps true of the apps it runs (their runner lease is its): each runs its
 * deployment's resource spec (changed in place, without a revision) and serves its endpoints
 * (docs/app-urls.md, "Endpoints"), what became of each endpoint reported through the data-plane reports.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { OwnPlaneReports } from '../domain/data-plane.ts';
import { desiredResourceSpec, servingRevisionId } from '../domain/desired-state.ts';
import type { Database } from '../store/schema.ts';
import { runnerDeployments, type LeaseOwner } from '../store/work-leases.ts';
import { endpointWants } from './endpoint-wants.ts';
import type { EndpointOutcome, LocalRuntime } from './local-runtime.ts';

export interface RunningAppDeps {
  db: Kysely<Database>;
  runtime: LocalRuntime;
  reports: OwnPlaneReports;
  logger: Logger;
  owner: LeaseOwner;
}

/**
 * Scales the apps whose runner lease this worker holds to their deployment's resource spec. Not
 * awaited: a slow health check holds up no other work (the next pass retries what was skipped).
 */
export async function applyResourceSpecs({ db, runtime, logger, owner }: RunningAppDeps): Promise<void> {
  for (const deployment of await runnerDeployments(db, owner, runtime.running())) {
    // What serves and with which spec: the one rule's, as a listener reads it in its desired state.
    const serving = servingRevisionId(deployment);
    if (serving === null) continue;
    const deploymentId = deployment.id;
    void runtime
      .rescale(deploymentId, serving, desiredResourceSpec(deployment))
      .catch((error: unknown) => logger.error({ err: error, deploymentId }, 'could not apply a changed resource spec'));
  }
}

/**
 * Serves the endpoints of the deployments this worker runs (docs/app-urls.md, "Endpoints"). Not
 * awaited, as resource specs: a start waits for a health check; the runtime runs one pass per
 * deployment at a time and the latest request after it.
 */
export async function applyEndpoints(deps: RunningAppDeps): Promise<void> {
  const { db, runtime, logger } = deps;
  const running = runtime.running();
  if (running.length === 0) return;
  const wants = await endpointWants(db, running);
  for (const deploymentId of running) {
    const { wanted, marked, markedSplits } = wants.get(deploymentId)!;
    void runtime
      .serveEndpoints(deploymentId, wanted, (outcome) =>
        reportEndpoint(deps.reports, deploymentId, outcome, outcome.split ? markedSplits : marked),
      )
      .catch((error: unknown) => logger.error({ err: error, deploymentId }, 'could not serve endpoints'));
  }
}

/** Says what became of an endpoint's start: its served revision, and an event (the lifecycle records both). */
async function reportEndpoint(
  reports: OwnPlaneReports,
  deploymentId: string,
  outcome: EndpointOutcome,
  marked: Map<string, string | null>,
): Promise<void> {
  const recordedRevisionId = marked.get(outcome.endpoint) ?? null;
  await reports.reportEndpoint(
    outcome.served
      ? {
          ...(outcome.split ? { split: outcome.split } : {}),
          deploymentId,
          endpoint: outcome.endpoint,
          revisionId: outcome.revisionId,
          recordedRevisionId,
          served: true,
          fromRevisionId: outcome.fromRevisionId,
        }
      : {
          ...(outcome.split ? { split: outcome.split } : {}),
          deploymentId,
          endpoint: outcome.endpoint,
          revisionId: outcome.revisionId,
          recordedRevisionId,
          served: false,
          message: outcome.message,
        },
  );
}
