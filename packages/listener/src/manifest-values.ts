/**
 * Values that go into the listener's manifests: resource requests and limits as Kubernetes quantities,
 * and a Secret's data.
 */
import type { V1ResourceRequirements } from '@kubernetes/client-node';

const cpuQuantity = (cores: number): string => `${Math.round(cores * 1000)}m`;
const memoryQuantity = (mb: number): string => `${mb}Mi`;

/** Requests and limits from cores and megabytes; fields left unset stay unset (the namespace's defaults apply). */
export function resources(
  cpu: number | undefined,
  memoryMb: number | undefined,
  cpuLimit: number | undefined,
  memoryLimitMb: number | undefined,
): V1ResourceRequirements | undefined {
  const requests: Record<string, string> = {};
  const limits: Record<string, string> = {};
  // 0 cores rounds to nothing requested: leave it out rather than ask for "0m".
  if (cpu !== undefined && cpu > 0) requests.cpu = cpuQuantity(cpu);
  if (memoryMb !== undefined) requests.memory = memoryQuantity(memoryMb);
  if (cpuLimit !== undefined && cpuLimit > 0) limits.cpu = cpuQuantity(cpuLimit);
  if (memoryLimitMb !== undefined) limits.memory = memoryQuantity(memoryLimitMb);
  const out: V1ResourceRequirements = {};
  if (Object.keys(requests).length > 0) out.requests = requests;
  if (Object.keys(limits).length > 0) out.limits = limits;
  return Object.keys(out).length > 0 ? out : undefined;
}

/** A base64 Secret data map (server-side apply owns `data` cleanly; `stringData` is write-only). */
export const secretData = (entries: Record<string, string>): Record<string, string> =>
  Object.fromEntries(Object.entries(entries).map(([k, v]) => [k, Buffer.from(v, 'utf8').toString('base64')]));
