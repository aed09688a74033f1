/**
 * The service with a fake GitHub beside it, for the HTTP tests of code-host integrations: the service
 * runs with plain-http code hosts allowed and the fake's URL on the allow-list (the fake listens on
 * loopback), and with client retries off, so a failing host answers at once.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { client, createTestApp, type TestApp, newWorkspace } from '../support/harness.ts';
import {
  createTestApp as createGitHubApp,
  makeRepositories,
  startFakeGitHub,
  type FakeGitHub,
  type FakeGitHubOptions,
  type FakeVisibility,
  type TestApp as GitHubApp,
} from '../fakes/github-server.ts';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';

export const TOKEN = 'ghp_fixturetoken0123456789abcdefghijkl';
export const INSTALLATION_ID = 7;

export interface CodehostFixture {
  t: TestApp;
  api: ReturnType<typeof client>;
  github: FakeGitHub;
  githubApp: GitHubApp;
  close(): Promise<void>;
}

/**
 * `installation`: the repositories the App installation INSTALLATION_ID covers (default all).
 * `allowedUrls`: code-host API URLs the service may reach besides the fake's (SLIPWAY_CODEHOST_ALLOWED_URLS).
 */
export async function startCodehostFixture(
  options: FakeGitHubOptions & { installation?: FakeVisibility; allowedUrls?: string[] } = {},
): Promise<CodehostFixture> {
  const githubApp = createGitHubApp(4242);
  const { installation = 'all', allowedUrls = [], ...fakeOptions } = options;
  const github = await startFakeGitHub({
    repositories: makeRepositories(250),
    tokens: { [TOKEN]: 'all' },
    apps: [{ id: githubApp.id, publicKey: githubApp.publicKey, installations: { [INSTALLATION_ID]: installation } }],
    ...fakeOptions,
  });
  const t = await createTestApp(
    {
      SLIPWAY_ALLOW_INSECURE_CODEHOST: '1',
      // The fake listens on loopback, which the default list (https://api.github.com only) refuses.
      SLIPWAY_CODEHOST_ALLOWED_URLS: [github.url, ...allowedUrls].join(','),
      SLIPWAY_PUBLIC_URL: 'https://slipway.example.com',
    },
    { codehostClient: { retries: 0 } },
  );
  return {
    t,
    api: client(t.app),
    github,
    githubApp,
    async close() {
      await t.close();
      await github.close();
    },
  };
}

export interface CreatedIntegration {
  id: string;
  webhook_secret: string;
  [field: string]: unknown;
}

export async function createTokenIntegration(
  f: CodehostFixture,
  name: string,
  extra: Record<string, unknown> = {},
): Promise<CreatedIntegration> {
  const res = await f.api.post('/v1/integrations/forge/codehost', {
    name,
    api_url: f.github.url,
    token: TOKEN,
    ...extra,
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body as CreatedIntegration;
}

/** A codehost deployment of `repo-NNN` tracking `ref`. */
export async function createCodehostDeployment(
  f: CodehostFixture,
  integrationId: string,
  name: string,
  options: { repo?: string; ref?: string; buildOnPush?: boolean } = {},
): Promise<{ id: string; latest_revision_id: string; [field: string]: unknown }> {
  const res = await f.api.post('/v2/deployments', {
    name,
    source: 'codehost',
    source_config: {
      integration_id: integrationId,
      repo_url: `${f.github.webOrigin}/octo-org/${options.repo ?? 'repo-001'}`,
      build_on_push: options.buildOnPush ?? true,
    },
    source_revision_config: { repo_ref: options.ref ?? 'main', framework_config_path: 'agent.json' },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body;
}

export function pushPayload(
  f: CodehostFixture,
  options: { repo?: string; ref?: string; after?: string; deleted?: boolean } = {},
): Record<string, unknown> {
  const repo = options.repo ?? 'repo-001';
  const htmlUrl = `${f.github.webOrigin}/octo-org/${repo}`;
  return {
    ref: options.ref ?? 'refs/heads/main',
    before: '0'.repeat(40),
    after: options.after ?? 'c0ffee'.padEnd(40, '1'),
    created: false,
    deleted: options.deleted ?? false,
    forced: false,
    repository: {
      id: 1001,
      name: repo,
      full_name: `octo-org/${repo}`,
      html_url: htmlUrl,
      clone_url: `${htmlUrl}.git`,
      default_branch: 'main',
    },
    pusher: { name: 'octocat', email: 'octocat@example.com' },
    head_commit: { id: options.after ?? 'c0ffee'.padEnd(40, '1'), message: 'Ship it' },
  };
}

export interface DeliveryOptions {
  /** X-GitHub-Event, default push; null sends none. */
  event?: string | null;
  deliveryId?: string;
  /** Secret to sign with; null sends no signature. */
  secret?: string | null;
  /** Sign this body but send `body` (a tampered delivery). */
  signedBody?: string;
  headers?: Record<string, string>;
}

/** Sends a delivery as GitHub does: raw JSON bytes, X-Hub-Signature-256, X-GitHub-Event, X-GitHub-Delivery. */
export async function deliver(
  f: CodehostFixture,
  integrationId: string,
  body: string | Record<string, unknown>,
  options: DeliveryOptions = {},
) {
  const raw = typeof body === 'string' ? body : JSON.stringify(body);
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    ...(options.event === null ? {} : { 'x-github-event': options.event ?? 'push' }),
    'x-github-delivery': options.deliveryId ?? randomUUID(),
    'user-agent': 'GitHub-Hookshot/abc123',
    ...options.headers,
  };
  if (options.secret !== null && options.secret !== undefined)
    headers['x-hub-signature-256'] = signWebhookBody(options.secret, options.signedBody ?? raw);
  const response = await f.t.app.inject({
    method: 'POST',
    url: `/v1/integrations/forge/codehost/${integrationId}/webhooks`,
    headers,
    payload: raw,
  });
  return {
    status: response.statusCode,
    body: response.body === '' ? undefined : JSON.parse(response.body),
    headers: response.headers,
  };
}

/** Another workspace of the same organization, with a client acting in it. */
export async function otherWorkspace(
  f: CodehostFixture,
  name: string,
): Promise<{ id: string; api: ReturnType<typeof client> }> {
  return newWorkspace(f.t, name);
}

export async function revisionsOf(
  f: CodehostFixture,
  deploymentId: string,
): Promise<{ id: string; source_revision_config: Record<string, unknown>; status: string }[]> {
  const res = await f.api.get(`/v2/deployments/${deploymentId}/revisions?limit=100`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.resources;
}
