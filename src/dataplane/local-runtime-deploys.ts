/**
 * A revision's way to serving on this machine (src/dataplane/local-runtime.ts): built, deployed beside
 * what serves (routed before the commit, served after it), or resumed from its build after a restart
 * of the service. How it is built is src/dataplane/app-build.ts, how its app is started
 * src/dataplane/app-start.ts.
 */
import { appUrl } from './app-edge.ts';
import { buildApp } from './app-build.ts';
import { requireBuild, startApp } from './app-start.ts';
import { readBuild, revisionDirs, type BuildHooks, type BuildRecord } from './revision-build.ts';
import { inSpan } from '../telemetry/tracing.ts';
import type { RevisionJob } from './local-runtime-types.ts';
import { release, serve, type RuntimeState } from './local-runtime-serving.ts';
import { pauseIfWanted } from './local-runtime-scaling.ts';

export function buildOnce(
  r: RuntimeState,
  job: RevisionJob,
  hooks: BuildHooks,
  signal: AbortSignal,
): Promise<BuildRecord> {
  return buildApp(r.starter, job, hooks, signal);
}

/** Starts the revision, routes it beside what serves, commits, then serves it alone. */
export async function deployOnce(
  r: RuntimeState,
  job: RevisionJob,
  signal: AbortSignal,
  commit: (customUrl: string) => Promise<void>,
): Promise<void> {
  const { edge, logger } = r.deps;
  const build = await requireBuild(r.deps.config.dataDir, job);
  const next = await startApp(r.starter, job, build, signal);
  // DEPLOYED means served: the new instances join the route (beside the ones serving now, so
  // nothing is drained yet) before the commit, and leave it again if the commit fails.
  const serving = r.apps.get(job.deployment.id)?.supervisor.webTargets ?? [];
  try {
    await inSpan('switch', {}, async () => {
      await edge.setTargets(next.slug, [...serving, ...next.supervisor.webTargets]);
      await commit(appUrl(edge, next.slug));
    });
  } catch (error) {
    await (serving.length > 0 ? edge.setTargets(next.slug, serving) : edge.remove(next.slug)).catch(
      (routeError: unknown) => logger.error({ err: routeError }, 'the app route could not be restored'),
    );
    await release(r, job.deployment.id, next);
    throw error;
  }
  await serve(r, job.deployment.id, next);
  await pauseIfWanted(r, job.deployment.id, next);
}

/** Starts the deployment's active revision again from its build, building it again when it must. */
export async function resumeOnce(r: RuntimeState, job: RevisionJob): Promise<void> {
  let build = await readBuild(revisionDirs(r.deps.config.dataDir, job.revisionId));
  if (!build?.sealed) {
    // Another machine built it, its files were removed, or a version that did not seal builds made it
    // (its app could change it, even replace its src with a link): build it again, quietly (it is DEPLOYED).
    build = await buildOnce(
      r,
      job,
      { building: async () => undefined, commitResolved: async () => undefined },
      new AbortController().signal,
    );
  }
  const next = await startApp(r.starter, job, build, new AbortController().signal);
  await serve(r, job.deployment.id, next);
  await pauseIfWanted(r, job.deployment.id, next);
}
