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
import { ValidationError, type ValidationIssue } from '../errors.ts';
import { countQuotaEndpoints, quotaCountedEndpointSpecs } from '../store/deployment-endpoints.ts';
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

/**
 * What one endpoint of a deployment with this spec uses: a copy of its instances (memory, CPU,
 * instances), and neither a deployment nor database storage of its own (docs/app-urls.md, "Endpoints").
 */
function endpointUsage(spec: Record<string, unknown> | null, policy: ResourcePolicy): WorkspaceUsage {
  return { ...usageOfSpec(spec, policy.defaults), deployments: 0, database_storage_gi: 0 };
}

function plus(a: WorkspaceUsage, b: WorkspaceUsage): WorkspaceUsage {
  const sum = addUsage([a, b]);
  return { ...sum, deployments: a.deployments + b.deployments };
}

/** What the workspace's deployments on the own data plane use, their endpoints' instances included, but `exceptId`'s. */
export async function workspaceUsage(
  db: Db,
  policy: ResourcePolicy,
  workspaceId: string,
  exceptId: string | null = null,
): Promise<WorkspaceUsage> {
  const specs = await quotaCountedSpecs(db, workspaceId, exceptId);
  const endpoints = await quotaCountedEndpointSpecs(db, workspaceId, exceptId);
  return endpoints.reduce(
    (usage, spec) => plus(usage, endpointUsage(spec, policy)),
    addUsage(specs.map((spec) => usageOfSpec(spec, policy.defaults))),
  );
}

/**
 * What is over the workspace's quota of memory, CPU or instances when one more copy of the deployment's
 * instances runs (`what` names it in the message: another endpoint, a preview); empty when it fits. Run
 * inside the write's transaction: the workspace row is locked.
 */
export async function endpointQuotaProblems(
  tx: Db,
  policy: ResourcePolicy,
  workspaceId: string,
  spec: Record<string, unknown> | null,
  what = 'another endpoint of this deployment',
): Promise<ValidationIssue[]> {
  const quota = await lockWorkspaceQuota(tx, workspaceId);
  if (!quota || !hasQuota(quota)) return [];
  const used = await workspaceUsage(tx, policy, workspaceId);
  const copy = endpointUsage(spec, policy);
  const issues: ValidationIssue[] = [];
  for (const key of ['memory_mb', 'cpu', 'instances'] as const) {
    const limit = quota[key];
    if (limit === null || used[key] + copy[key] <= limit) continue;
    issues.push({
      type: 'quota_exceeded',
      loc: ['body', 'revision_id'],
      msg: `The workspace's quota allows ${limit} ${key} in all; its deployments and endpoints use ${used[key]}, and ${what} runs ${copy[key]} more`,
      input: null,
    });
  }
  return issues;
}

/**
 * Throws a 422 when one more endpoint of the deployment (a copy of its instances) would take the
 * workspace over its quota of memory, CPU or instances. Run inside the write's transaction.
 */
export async function checkEndpointQuota(
  tx: Db,
  policy: ResourcePolicy,
  workspaceId: string,
  spec: Record<string, unknown> | null,
): Promise<void> {
  const issues = await endpointQuotaProblems(tx, policy, workspaceId, spec);
  if (issues.length > 0) throw new ValidationError(issues);
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
  // The patched deployment's endpoints run copies of its instances with the new spec: counted (and told
  // apart in the message) by specOverQuota, not among the other deployments' use.
  const endpoints = patched ? await countQuotaEndpoints(tx, patched.id) : 0;
  const others = await workspaceUsage(tx, policy, workspaceId, patched?.id ?? null);
  const overQuota = specOverQuota(spec, policy.defaults, others, quota, patched ? patched.spec : undefined, endpoints);
  if (overQuota.length > 0) throw new ValidationError(overQuota);
}
