/**
 * Whether endpoints' HTTPRoutes can be written on this cluster (docs/listener.md, "Endpoints"): the
 * Gateway API's `gateway.networking.k8s.io/v1` must list HTTPRoute in the API's discovery (open to every
 * authenticated client by Kubernetes' default `system:discovery`), and the operator must have named the
 * Gateway they attach to. Looked at when the agent starts, then again while it is not found (at most once
 * per `rediscoverMs`: a cluster may get the Gateway API's CRDs while the agent runs), and at once after an
 * apply of an HTTPRoute was answered 404 (its CRDs were removed). What it finds is logged when it changes.
 */
import type { Logger } from 'pino';
import type { ListenerConfig } from './config.ts';
import { HTTP_ROUTE_API_VERSION, routesUnavailable, type GatewaySupport } from './endpoint-manifests.ts';
import type { KubeClient } from './kube-client.ts';

/** How often a cluster without the Gateway API is looked at again, by default. */
export const DEFAULT_GATEWAY_REDISCOVER_MS = 60_000;

export interface GatewayDiscovery {
  /** What was found last (no Gateway API before the first look). */
  current(): GatewaySupport;
  /** Looks at the API's discovery when due; true when the Gateway API is served now and was not before. */
  refresh(): Promise<boolean>;
  /** An HTTPRoute apply was answered 404: the next `refresh` looks again, whenever it looked last. */
  routesGone(): void;
}

export function createGatewayDiscovery(
  kube: KubeClient,
  config: Pick<ListenerConfig, 'gateway' | 'gatewayDomain'>,
  logger: Logger,
  rediscoverMs: number = DEFAULT_GATEWAY_REDISCOVER_MS,
): GatewayDiscovery {
  const parent = config.gateway ?? null;
  const domain = config.gatewayDomain ?? null;
  let support: GatewaySupport = { httpRoutes: false, parent, domain };
  let lookedAt: number | null = null;
  let told: string | null = null;

  async function look(): Promise<boolean> {
    lookedAt = Date.now();
    let httpRoutes = false;
    try {
      httpRoutes = await kube.serves(HTTP_ROUTE_API_VERSION, 'HTTPRoute');
    } catch (error) {
      // Taken as not served until the next look: endpoints still run, their splits are not served (and say why).
      logger.warn(
        { err: error instanceof Error ? error.message : String(error) },
        'could not read the API discovery of the Gateway API; endpoints get no HTTPRoute until it is read',
      );
    }
    const before = support.httpRoutes;
    support = { httpRoutes, parent, domain };
    const missing = routesUnavailable(support);
    if (missing !== told) {
      told = missing;
      if (missing === null)
        logger.info(
          { gateway: `${parent!.namespace}/${parent!.name}`, domain },
          "endpoints get an HTTPRoute on the operator's Gateway; their splits are served by weight once it accepts them",
        );
      else logger.warn(`endpoints get no HTTPRoute and their splits are not served: ${missing}`);
    }
    return httpRoutes && !before;
  }

  return {
    current: () => support,
    refresh: async () => {
      const due = lookedAt === null || (!support.httpRoutes && Date.now() - lookedAt >= rediscoverMs);
      return due ? look() : false;
    },
    routesGone: () => {
      lookedAt = null;
    },
  };
}
