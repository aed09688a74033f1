/**
 * Which Kubernetes versions the agent is made for, and what an older API server cannot do. The agent
 * reads the version once at start (GET /version) and logs it: a supported one at info, an older one as
 * a warning naming the version and what will not work there. It does not refuse to run: everything
 * else works, and what does not is refused by the API server, in its words, as `invalid_manifest`.
 */
import type { Logger } from 'pino';
import type { KubeClient, ServerVersion } from './kube-client.ts';

/** The oldest minor version (of 1.x) everything of docs/listener.md works on: native sidecars. */
export const SUPPORTED_MINOR = 29;

/** What does not work on a 1.`minor` API server, oldest limit last; empty from `SUPPORTED_MINOR` on. */
export function versionLimits(minor: number): string[] {
  const limits: string[] = [];
  if (minor < 29)
    limits.push(
      minor === 28
        ? 'sidecars need native sidecars, off by default in 1.28 (feature gate SidecarContainers): without it the API server drops their restartPolicy and a sidecar holds the pod up as an init container that never ends'
        : 'sidecars need native sidecars (1.29): the API server refuses their restartPolicy, and such a revision fails with invalid_manifest',
    );
  if (minor < 27)
    limits.push(
      'a field the API server does not know fails server-side apply with a 500 ("field not declared in schema") whatever fieldValidation says, reported as invalid_manifest with that message',
    );
  if (minor < 23) limits.push('autoscaling/v2 does not exist: an autoscaled deployment (max_scale > min_scale) fails');
  return limits;
}

/** Reads the API server's version and logs what it means; never throws (an unknown version is logged, not fatal). */
export async function checkServerVersion(kube: KubeClient, logger: Logger): Promise<ServerVersion | null> {
  let version: ServerVersion;
  try {
    version = await kube.version();
  } catch (error) {
    logger.warn(
      { err: error instanceof Error ? error.message : String(error) },
      `could not read the Kubernetes API server version; the listener is made for 1.${SUPPORTED_MINOR} or newer`,
    );
    return null;
  }
  const { major, minor, gitVersion } = version;
  const limits = major === 1 && Number.isFinite(minor) ? versionLimits(minor) : [];
  if (limits.length === 0) {
    logger.info({ kubernetes_version: gitVersion }, `Kubernetes API server ${gitVersion}`);
  } else {
    logger.warn(
      { kubernetes_version: gitVersion, not_working: limits },
      `Kubernetes 1.${minor} (${gitVersion}) is older than this listener supports (1.${SUPPORTED_MINOR} or newer): ${limits.join('; ')}`,
    );
  }
  return version;
}
