/**
 * The operator's maxima and the workspace's quota applied to a deployment's resource spec before it is
 * stored (issue 33): the deployment service calls `check` inside the write's transaction. Deployments
 * of a listener are not held to them (src/domain/resource-maxima.ts says why).
 */
import {
  addUsage,
  specOverMaxima,
  specOverQuota,
  usageOfSpec,
  type SpecDefaults,
  type SpecMaxima,
  type WorkspaceQuota,
  type WorkspaceUsage,
} from '../domain/resource-maxima.ts';
import type { SourceConfig } from '../domain/sources.ts';
import { ValidationError } from '../errors.ts';
import type { Db } from '../store/schema.ts';
import { lockWorkspaceQuota, quotaCountedSpecs } from '../store/workspace-quotas.ts';

export interface ResourcePolicy {
  /** The operator's maxima (config.limits). */
  maxima: SpecMaxima;
  /** What an instance gets when its spec is silent (config.defaultLimits), counted against the quota. */
  defaults: SpecDefaults;
  /** The memory of all apps together (config.limits.appsMemoryMb): no workspace's quota exceeds it. */
  appsMemoryMb: number;
}

/** The policy of a service whose configuration is `config` (src/config.ts). */
export function resourcePolicyOf(config: {
  limits: {
    instanceMemoryMb: number;
    instanceCpu: number;
    instances: number;
    appsMemoryMb: number;
    databaseStorageGi: number;
    defaultDatabaseStorageGi: number;
  };
  defaultLimits: { memoryBytes: number; cpu: number };
}): ResourcePolicy {
  const { instanceMemoryMb, instanceCpu, instances, databaseStorageGi } = config.limits;
  return {
    maxima: { instanceMemoryMb, instanceCpu, instances, databaseStorageGi },
    appsMemoryMb: config.limits.appsMemoryMb,
    defaults: {
      memoryMb: Math.round(config.defaultLimits.memoryBytes / 1024 ** 2),
      cpu: config.defaultLimits.cpu,
      databaseStorageGi: config.limits.defaultDatabaseStorageGi,
      maxDatabaseStorageGi: databaseStorageGi,
    },
  };
}

const hasQuota = (quota: WorkspaceQuota) => Object.values(quota).some((v) => v !== null);

/** What the workspace's deployments on the own data plane use, but `exceptId`. */
export async function workspaceUsage(
  db: Db,
  policy: ResourcePolicy,
  workspaceId: string,
  exceptId: string | null = null,
): Promise<WorkspaceUsage> {
  const specs = await quotaCountedSpecs(db, workspaceId, exceptId);
  return addUsage(specs.map((spec) => usageOfSpec(spec, policy.defaults)));
}

/**
 * Throws a 422 (ValidationError) when the deployment's spec is over a maximum or, with the other
 * deployments of the workspace, over its quota. Run inside the write's transaction: the workspace row is
 * locked, so concurrent writes of one workspace are counted one after the other. `patched` is the
 * deployment being patched and its spec before (null for a create).
 */
export async function checkResourceLimits(
  tx: Db,
  policy: ResourcePolicy,
  workspaceId: string,
  sourceConfig: SourceConfig,
  patched: { id: string; spec: Record<string, unknown> | null } | null,
): Promise<void> {
  if (sourceConfig.listener_id) return;
  const spec = sourceConfig.resource_spec ?? null;
  const overMaxima = specOverMaxima(spec, policy.maxima);
  if (overMaxima.length > 0) throw new ValidationError(overMaxima);
  const quota = await lockWorkspaceQuota(tx, workspaceId);
  if (!quota || !hasQuota(quota)) return;
  const others = await workspaceUsage(tx, policy, workspaceId, patched?.id ?? null);
  const overQuota = specOverQuota(spec, policy.defaults, others, quota, patched ? patched.spec : undefined);
  if (overQuota.length > 0) throw new ValidationError(overQuota);
}
