/** Rules across fields of a resource spec that a schema cannot say: a minimum never above its maximum. */
import { AppError } from '../errors.ts';

const PAIRS: readonly [string, string][] = [
  ['min_scale', 'max_scale'],
  ['queue_min_scale', 'queue_max_scale'],
  ['orchestrator_min_scale', 'orchestrator_max_scale'],
  ...['', 'queue_', 'orchestrator_', 'executor_', 'cache_', 'db_'].flatMap((p): [string, string][] => [
    [`${p}cpu`, `${p}cpu_limit`],
    [`${p}memory_mb`, `${p}memory_limit_mb`],
  ]),
];

export function checkResourceSpec(spec: Record<string, unknown> | null | undefined): void {
  if (!spec) return;
  for (const [low, high] of PAIRS) {
    const a = spec[low];
    const b = spec[high];
    if (typeof a === 'number' && typeof b === 'number' && a > b) {
      throw new AppError('invalid_request', `source_config.resource_spec.${low} (${a}) must not exceed ${high} (${b})`);
    }
  }
}
