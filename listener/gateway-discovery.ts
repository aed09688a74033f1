/**
 * Whether endpoints' HTTPRoutes can be written on this cluster (docs/listener.md, "Endpoints"): the
 * Gateway API's `gateway.networking.k8s.io/v1` must list HTTPRoute in the API's discovery (open to every
 * authenticated client by Kubernetes' default `system:discovery`), and the operator must have named the
 * Gateway they attach to. Looked at once, at start; what it found is logged, with what does not work.
 */
import type { Logger } from 'pino';
import type { ListenerConfig } from './config.ts';
import { HTTP_ROUTE_API_VERSION, routesUnavailable, type GatewaySupport } from './endpoint-manifests.ts';
import type { KubeClient } from './kube-client.ts';

export async function discoverGateway(
  kube: KubeClient,
  config: Pick<ListenerConfig, 'gateway' | 'gatewayDomain'>,
  logger: Logger,
): Promise<GatewaySupport> {
  let httpRoutes = false;
  try {
    httpRoutes = await kube.serves(HTTP_ROUTE_API_VERSION, 'HTTPRoute');
  } catch (error) {
    // Taken as not served until the agent restarts: endpoints still run, their splits are refused (and say why).
    logger.warn(
      { err: error instanceof Error ? error.message : String(error) },
      'could not read the API discovery of the Gateway API; endpoints get no HTTPRoute until the listener restarts',
    );
  }
  const support: GatewaySupport = {
    httpRoutes,
    parent: config.gateway ?? null,
    domain: config.gatewayDomain ?? null,
  };
  const missing = routesUnavailable(support);
  if (missing === null)
    logger.info(
      { gateway: `${support.parent!.namespace}/${support.parent!.name}`, domain: support.domain },
      "endpoints get an HTTPRoute on the operator's Gateway; their splits are served by weight",
    );
  else logger.warn(`endpoints get no HTTPRoute and their splits are not served: ${missing}`);
  return support;
}
