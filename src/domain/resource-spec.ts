/**
 * Rules across fields of a resource spec that a schema cannot say (a minimum never above its maximum),
 * and which of its fields are the deployment's scale rather than part of a revision's snapshot.
 */
import { AppError } from '../errors.ts';

type ResourceSpec = Record<string, unknown>;

/**
 * How many instances run: the deployment's, never restored by a redeploy (docs/lifecycle.md, "What a
 * redeploy restores"). A rollback is made in a hurry, often under load; dropping to the instance count
 * of the day the old revision was made would be a second outage.
 */
export const SCALE_FIELDS = [
  'min_scale',
  'max_scale',
  'queue_min_scale',
  'queue_max_scale',
  'orchestrator_min_scale',
  'orchestrator_max_scale',
] as const;

/** The scale fields the spec sets (an empty object when it sets none). */
export function scaleOfSpec(spec: ResourceSpec | null | undefined): ResourceSpec {
  const scale: ResourceSpec = {};
  for (const field of SCALE_FIELDS) if (spec?.[field] !== undefined) scale[field] = spec[field];
  return scale;
}

/**
 * A revision's resource spec as a redeploy puts it back: its fields, except the scale, which stays the
 * deployment's current one. Null when neither has a field.
 */
export function restoredResourceSpec(
  revision: ResourceSpec | null | undefined,
  current: ResourceSpec | null | undefined,
): ResourceSpec | null {
  const restored: ResourceSpec = { ...revision };
  for (const field of SCALE_FIELDS) delete restored[field];
  Object.assign(restored, scaleOfSpec(current));
  return Object.keys(restored).length > 0 ? restored : null;
}

const PAIRS: readonly [string, string][] = [
  ['min_scale', 'max_scale'],
  ['queue_min_scale', 'queue_max_scale'],
  ['orchestrator_min_scale', 'orchestrator_max_scale'],
  ...['', 'queue_', 'orchestrator_', 'executor_', 'cache_', 'db_'].flatMap((p): [string, string][] => [
    [`${p}cpu`, `${p}cpu_limit`],
    [`${p}memory_mb`, `${p}memory_limit_mb`],
  ]),
];

export function checkResourceSpec(spec: ResourceSpec | null | undefined): void {
  if (!spec) return;
  for (const [low, high] of PAIRS) {
    const a = spec[low];
    const b = spec[high];
    if (typeof a === 'number' && typeof b === 'number' && a > b) {
      throw new AppError('invalid_request', `source_config.resource_spec.${low} (${a}) must not exceed ${high} (${b})`);
    }
  }
}
