/**
 * The configuration of an app edge started on its own by a test or a bench (`startAppEdge`): loopback, a
 * free port, no public URL and no TLS unless a test gives them, the edge of the kind under test.
 */
import type { AppEdgeDeps } from '../../src/dataplane/app-edge.ts';

type EdgeConfig = AppEdgeDeps['config'];

export function localEdgeConfig(
  dataDir: string,
  edgeProxy: EdgeConfig['edgeProxy'],
  overrides: Partial<EdgeConfig> = {},
): EdgeConfig {
  return {
    dataDir,
    appsDomain: 'localhost',
    appsHost: '127.0.0.1',
    appsPort: 0,
    appsPublicUrl: null,
    appsTls: null,
    edgeProxy,
    drainTimeoutMs: 2_000,
    ...overrides,
  };
}
