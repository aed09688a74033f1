/**
 * The measured scenarios (docs/performance.md, "Method"), as data: what request to send (with `{slot}` and `{unique}`
 * placeholders, see load-protocol.ts) and, for the SQL replay, which values one request created.
 */
import type { MeasuredWorkspace } from './seed.ts';

export interface Scenario {
  key: string;
  title: string;
  kind: 'read' | 'write';
  method: 'GET' | 'POST' | 'PATCH';
  /** May contain `{slot}`, which cycles through `slots`. */
  path: string;
  slots: string[];
  /** May contain `{unique}`. */
  body: string | null;
  expectStatus: number;
  /** Ids in the response that the request itself made: the replay makes new ones each time. */
  createdIds(response: Record<string, unknown>): string[];
  /** A patch reads and supersedes its deployment's latest revision: state carried per slot. */
  carriesLatestRevision: boolean;
}

const none = () => [];
const field = (response: Record<string, unknown>, name: string): string => {
  const value = response[name];
  if (typeof value !== 'string') throw new Error(`response has no ${name}`);
  return value;
};

/** Page size of every list scenario: the API's default. */
export const PAGE = 20;

export function scenariosFor(ws: MeasuredWorkspace): Scenario[] {
  const read = (key: string, title: string, path: string, slots: string[] = []): Scenario => ({
    key,
    title,
    kind: 'read',
    method: 'GET',
    path,
    slots,
    body: null,
    expectStatus: 200,
    createdIds: none,
    carriesLatestRevision: false,
  });
  const lateOffset = Math.floor(ws.size * 0.9);
  return [
    read('list-first', 'list deployments, first page', `/v2/deployments?limit=${PAGE}`),
    read('list-late', `list deployments, offset ${lateOffset}`, `/v2/deployments?limit=${PAGE}&offset=${lateOffset}`),
    read('list-name', 'list deployments, name_contains', `/v2/deployments?limit=${PAGE}&name_contains=canary`),
    read('list-status', 'list deployments, status', `/v2/deployments?limit=${PAGE}&status=UNUSED`),
    read('get', 'get a deployment', '/v2/deployments/{slot}', ws.getIds),
    read(
      'revisions',
      `list revisions (${ws.size} revisions)`,
      `/v2/deployments/${ws.historyDeploymentId}/revisions?limit=${PAGE}`,
    ),
    {
      key: 'create',
      title: 'create a deployment',
      kind: 'write',
      method: 'POST',
      path: '/v2/deployments',
      slots: [],
      body: JSON.stringify({
        name: '{unique}',
        source: 'internal_container',
        source_config: {
          deployment_type: 'prod',
          resource_spec: { min_scale: 1, max_scale: 3, cpu: 0.5, memory_mb: 512 },
        },
        source_revision_config: { image_uri: 'registry.example.com/agents/bench:2.0.0' },
        secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-bench-not-a-real-key' }],
      }),
      expectStatus: 201,
      createdIds: (r) => [field(r, 'id'), field(r, 'latest_revision_id'), field(r, 'tracing_project_id')],
      carriesLatestRevision: false,
    },
    {
      key: 'patch',
      title: 'patch, new revision',
      kind: 'write',
      method: 'PATCH',
      path: '/v2/deployments/{slot}',
      slots: ws.patchIds,
      // Each patch names a new image tag, as a CI pipeline does.
      body: JSON.stringify({ source_revision_config: { image_uri: 'registry.example.com/agents/bench:{unique}' } }),
      expectStatus: 200,
      createdIds: (r) => [field(r, 'latest_revision_id')],
      carriesLatestRevision: true,
    },
    {
      key: 'listener',
      title: 'create a listener',
      kind: 'write',
      method: 'POST',
      path: '/v2/listeners',
      slots: [],
      body: JSON.stringify({
        compute_type: 'k8s',
        compute_id: '{unique}',
        compute_config: { k8s_namespaces: ['agents'] },
        version: '0.1.0',
      }),
      expectStatus: 201,
      createdIds: (r) => [field(r, 'id')],
      carriesLatestRevision: false,
    },
  ];
}
