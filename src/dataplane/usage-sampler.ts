/**
 * Samples what each running route's instances use (CPU and memory from their cgroups, through the local
 * runtime) into the edge's series per revision (src/dataplane/traffic-series.ts), once per bucket.
 */
import type { Logger } from 'pino';
import type { AppRuntimeStats } from './local-runtime-types.ts';
import { BUCKET_SECONDS, type TrafficSeries } from './traffic-series.ts';

export interface UsageSamplerDeps {
  traffic: TrafficSeries;
  appStats(): Promise<AppRuntimeStats[]>;
  logger: Logger;
  intervalMs?: number;
}

export function startUsageSampler(deps: UsageSamplerDeps): { sample(): Promise<void>; stop(): Promise<void> } {
  let running: Promise<void> = Promise.resolve();
  const sample = async () => {
    const stats = await deps.appStats();
    deps.traffic.sampleUsage(
      stats.map((app) => ({
        label: app.slug,
        revisionId: app.revisionId,
        instances: app.instances.map((i) => ({
          instanceId: i.instanceId,
          cpuSeconds: i.usage.cpuSeconds,
          memoryBytes: i.usage.memoryBytes,
        })),
      })),
    );
  };
  const timer = setInterval(
    () => {
      running = sample().catch((error: unknown) =>
        // The next sample tries again; the series show no usage for this bucket meanwhile.
        deps.logger.debug({ err: error }, 'usage sample failed'),
      );
    },
    deps.intervalMs ?? BUCKET_SECONDS * 1000,
  );
  timer.unref();
  return {
    sample,
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
