/**
 * A resource spec against the operator's maxima and the workspace's quota (issue 33: the limits are the
 * operator's and the organization admin's, never the tenant's). Pure: the caller passes the maxima
 * (src/config-limits.ts), the quota and the use of the workspace's other deployments, and turns the
 * issues into a 422 before anything is stored. Only deployments on the service's own data plane are
 * held to them: a listener's deployments run on the user's own cluster, whose limits are its own.
 */
import type { ValidationIssue } from '../errors.ts';
import type { ResourceSpec } from './resource-spec.ts';

/** The per-instance and per-deployment maxima a spec is checked against. */
export interface SpecMaxima {
  readonly instanceMemoryMb: number;
  readonly instanceCpu: number;
  readonly instances: number;
  /** Database storage of one deployment, in GiB (`db_storage_gi`). */
  readonly databaseStorageGi: number;
}

/** What a deployment whose spec is silent gets, and what the quota counts for it. */
export interface SpecDefaults {
  readonly memoryMb: number;
  readonly cpu: number;
  /** Database storage in GiB. */
  readonly databaseStorageGi: number;
  /** The operator's maximum of database storage, in GiB: a stored spec above it is counted (and held) at it. */
  readonly maxDatabaseStorageGi: number;
}

/** A workspace's quota; a null field has no quota beyond the operator's maxima. */
export interface WorkspaceQuota {
  memory_mb: number | null;
  cpu: number | null;
  instances: number | null;
  deployments: number | null;
  /** Database storage of all its deployments, in GiB. */
  database_storage_gi: number | null;
}

/** What a workspace's deployments on the own data plane ask for together. */
export interface WorkspaceUsage {
  memory_mb: number;
  cpu: number;
  instances: number;
  deployments: number;
  database_storage_gi: number;
}

const LOC = ['body', 'source_config', 'resource_spec'];

/** Which maximum a spec field is held to, from its name (`queue_memory_limit_mb`, `orchestrator_min_scale`...). */
function kindOf(field: string): 'memory' | 'cpu' | 'instances' | 'database_storage' | null {
  if (field === 'db_storage_gi') return 'database_storage';
  if (/(^|_)memory(_limit)?_mb$/.test(field)) return 'memory';
  if (/(^|_)cpu(_limit)?$/.test(field)) return 'cpu';
  if (/(^|_)(min|max)_scale$/.test(field)) return 'instances';
  return null;
}

/** Every field of the spec over the operator's maxima, as 422 issues naming the maximum and its setting. */
export function specOverMaxima(spec: ResourceSpec | null | undefined, maxima: SpecMaxima): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  for (const [field, value] of Object.entries(spec ?? {})) {
    if (typeof value !== 'number') continue;
    const kind = kindOf(field);
    if (kind === null) continue;
    const [max, what] =
      kind === 'memory'
        ? [maxima.instanceMemoryMb, 'MiB of memory per instance (SLIPWAY_MAX_INSTANCE_MEMORY_MB)']
        : kind === 'cpu'
          ? [maxima.instanceCpu, 'CPU cores per instance (SLIPWAY_MAX_INSTANCE_CPU)']
          : kind === 'instances'
            ? [maxima.instances, 'instances per deployment (SLIPWAY_MAX_INSTANCES)']
            : [maxima.databaseStorageGi, 'GiB of database storage per deployment (SLIPWAY_MAX_DATABASE_STORAGE_GI)'];
    if (value > max) {
      issues.push({
        type: 'less_than_equal',
        loc: [...LOC, field],
        msg: `Input should be less than or equal to ${max}: the operator allows at most ${max} ${what}`,
        input: value,
      });
    }
  }
  return issues;
}

const positive = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : null;

/**
 * The database storage a deployment has, in GiB: its `db_storage_gi`, else the operator's default, and
 * never more than the operator's maximum (a spec stored before the maximum, or under a larger one, is
 * held to it). What the quota counts and what the own data plane enforces.
 */
export function databaseStorageOf(
  spec: ResourceSpec | null | undefined,
  defaults: Pick<SpecDefaults, 'databaseStorageGi' | 'maxDatabaseStorageGi'>,
): number {
  return Math.min(positive(spec?.db_storage_gi) ?? defaults.databaseStorageGi, defaults.maxDatabaseStorageGi);
}

/**
 * What one deployment asks of its workspace's quota: its web instances (`min_scale`, 1 when not given; 0
 * for a paused deployment, though a revision deployed while it is paused runs one web instance for its
 * health check, outside the quota) and its worker instances (`queue_min_scale`, when given), each
 * with its memory and CPU limit (the data plane's reading: the limit field, else the request, else the
 * defaults; workers the `queue_` fields, else the web ones). A worker the app's config adds without a `queue_min_scale` is not counted: the API does
 * not know the app's config (debt: the data plane's parent-group limits bound it).
 */
export function usageOfSpec(
  spec: ResourceSpec | null | undefined,
  defaults: SpecDefaults,
): Omit<WorkspaceUsage, 'deployments'> {
  // min_scale 0 pauses the deployment (docs/data-plane.md, "Paused"): no web instance runs once its revision is healthy.
  const web = spec?.min_scale === 0 ? 0 : Math.max(1, positive(spec?.min_scale) ?? 1);
  const workers = positive(spec?.queue_min_scale) ?? 0;
  const memory = positive(spec?.memory_limit_mb) ?? positive(spec?.memory_mb) ?? defaults.memoryMb;
  const cpu = positive(spec?.cpu_limit) ?? positive(spec?.cpu) ?? defaults.cpu;
  const queueGiven = (['cpu', 'cpu_limit', 'memory_mb', 'memory_limit_mb'] as const).some(
    (f) => spec?.[`queue_${f}`] != null,
  );
  const queueMemory = queueGiven
    ? (positive(spec?.queue_memory_limit_mb) ?? positive(spec?.queue_memory_mb) ?? defaults.memoryMb)
    : memory;
  const queueCpu = queueGiven ? (positive(spec?.queue_cpu_limit) ?? positive(spec?.queue_cpu) ?? defaults.cpu) : cpu;
  return {
    memory_mb: web * memory + workers * queueMemory,
    cpu: round(web * cpu + workers * queueCpu),
    instances: web + workers,
    database_storage_gi: databaseStorageOf(spec, defaults),
  };
}

/** CPU sums to two decimals: 0.1 + 0.2 is not to be refused as over 0.3. */
const round = (n: number) => Math.round(n * 100) / 100;
/** GiB sums to a thousandth (about a MiB), for the same reason. */
const roundGi = (n: number) => Math.round(n * 1000) / 1000;

/** The sum of several deployments' use. */
export function addUsage(specs: Omit<WorkspaceUsage, 'deployments'>[]): WorkspaceUsage {
  return {
    memory_mb: specs.reduce((sum, u) => sum + u.memory_mb, 0),
    cpu: round(specs.reduce((sum, u) => sum + u.cpu, 0)),
    instances: specs.reduce((sum, u) => sum + u.instances, 0),
    deployments: specs.length,
    database_storage_gi: roundGi(specs.reduce((sum, u) => sum + u.database_storage_gi, 0)),
  };
}

/**
 * Where the workspace's use with this deployment (`others` being the rest) would go over its quota, as
 * 422 issues: memory, CPU and instances on the spec's scale field, the deployment count on the body,
 * database storage on `db_storage_gi`.
 * `previous` is the deployment's spec before a patch (undefined for a create): a patch that asks no more
 * of a figure than before is never refused for it, so a workspace over a lowered quota can scale down.
 * `endpoints` is how many endpoints the deployment has: each runs a copy of its instances with this spec
 * (memory, CPU, instances; no deployment and no database storage of its own), counted here and told
 * apart from `others` in the message.
 */
export function specOverQuota(
  spec: ResourceSpec | null | undefined,
  defaults: SpecDefaults,
  others: WorkspaceUsage,
  quota: WorkspaceQuota,
  previous?: ResourceSpec | null,
  endpoints = 0,
): ValidationIssue[] {
  const own = usageOfSpec(spec, defaults);
  const before = previous === undefined ? null : usageOfSpec(previous, defaults);
  const { deployments: _count, ...othersAsked } = others;
  const copy = { ...own, database_storage_gi: 0 };
  const total = addUsage([own, othersAsked, ...Array.from({ length: endpoints }, () => copy)]);
  total.deployments = others.deployments + 1;
  /** What the deployment and its endpoints' copies ask together. */
  const withCopies = (key: 'memory_mb' | 'cpu' | 'instances') => round(own[key] * (1 + endpoints));
  const issues: ValidationIssue[] = [];
  const over = (
    key: keyof WorkspaceQuota,
    field: string,
    loc: (string | number)[],
    unit: string,
    input: unknown,
  ): void => {
    const limit = quota[key];
    if (limit === null || total[key] <= limit) return;
    if (before !== null && (key === 'deployments' || own[key] <= before[key])) return;
    const left = Math.max(0, key === 'database_storage_gi' ? roundGi(limit - others[key]) : round(limit - others[key]));
    const copied = key === 'memory_mb' || key === 'cpu' || key === 'instances' ? key : null;
    const start = `The workspace's quota allows ${limit} ${unit} in all (${field}); its other deployments`;
    const msg =
      copied === null
        ? `${start} use ${others[key]}, so this one may have at most ${left}, and it asks ${key === 'database_storage_gi' ? own.database_storage_gi : 1}`
        : endpoints === 0
          ? `${start} and their endpoints use ${others[key]}, so this one may have at most ${left}, and it asks ${own[copied]}`
          : `${start} and their endpoints use ${others[key]}, so this deployment and its ${endpoints} endpoint${endpoints === 1 ? '' : 's'} ` +
            `(each a copy of its instances) may have at most ${left} together, and they ask ${withCopies(copied)}: ` +
            `${own[copied]} for the deployment and ${own[copied]} for each endpoint`;
    issues.push({ type: 'quota_exceeded', loc, msg, input });
  };
  const memoryField = spec?.memory_limit_mb !== undefined ? 'memory_limit_mb' : 'memory_mb';
  const cpuField = spec?.cpu_limit !== undefined ? 'cpu_limit' : 'cpu';
  over('memory_mb', 'memory_mb', [...LOC, memoryField], 'MiB of memory', spec?.[memoryField] ?? null);
  over('cpu', 'cpu', [...LOC, cpuField], 'CPU cores', spec?.[cpuField] ?? null);
  over('instances', 'instances', [...LOC, 'min_scale'], 'instances', spec?.min_scale ?? null);
  over('deployments', 'deployments', ['body'], 'deployments', null);
  over(
    'database_storage_gi',
    'database_storage_gi',
    [...LOC, 'db_storage_gi'],
    'GiB of database storage',
    spec?.db_storage_gi ?? null,
  );
  return issues;
}
