/**
 * The proof of MCP servers as OAuth providers, end to end (docs/oauth.md, "MCP servers as providers"):
 *
 * - an MCP server that wants OAuth, built on @modelcontextprotocol/sdk's server with its bearer
 *   middleware checking the token's audience (test/fakes/mcp-oauth-server.ts), and its authorization
 *   server, `oidc-provider` with dynamic registration and resource indicators (test/fakes/oidc-server.ts),
 *   both on loopback;
 * - the provider registered in Slipway by `mcp_server_url` alone (discovery and dynamic registration);
 * - a person authorizing in Chromium: signs in and consents at the authorization server, whose redirect
 *   lands in Slipway's callback;
 * - a deployed agent: a LangGraph project deployed on the service's own data plane, whose graph gets a
 *   fresh access token from Slipway with the deployment's own agent credential and calls the MCP
 *   server's tool with the official MCP client. The tool's answer reaches the test as the run's output.
 *
 * Attacker's test here: the same agent calling another MCP server (of the same authorization server)
 * with that token is refused there (audience). Those of test/oauth/mcp-providers.test.ts cover the rest
 * (another workspace's agent gets 404; discovery of private addresses is refused).
 *
 * The deployment runs with SLIPWAY_SANDBOX=none: a sandboxed app has a network of its own that reaches
 * the internet but not this machine's loopback (docs/data-plane.md), where the MCP server of this test
 * listens. The build installs from the npm registry: it takes a minute or two.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { newCredential } from '../../src/auth/credentials.ts';
import { createApiKey } from '../../src/store/tenancy.ts';
import { launchChromium } from '../dashboard/browser.ts';
import {
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { startMcpOAuthServer, type McpOAuthServer } from '../fakes/mcp-oauth-server.ts';
import { startOidcServer, type OidcServer } from '../fakes/oidc-server.ts';
import { fetchApi, type FetchApi } from '../support/harness.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXAMPLE = path.resolve(HERE, '../../examples/langgraph-js');
const FIXTURE = path.resolve(HERE, '../fixtures/langgraph-mcp-oauth');
/** The deployment's name, and so the agent its own agent credential reaches (docs/oauth.md). */
const AGENT = 'mcp-caller';

let service: TestService;
let idp: OidcServer;
let one: McpOAuthServer;
let two: McpOAuthServer;
let browser: Browser;
let source: string;
let orgApi: FetchApi;
let deployment: Promise<{ id: string; url: string }>;

before(async () => {
  [service, idp, browser] = await Promise.all([
    startTestService({
      SLIPWAY_SANDBOX: 'none',
      SLIPWAY_ALLOW_INSECURE_OAUTH: '1',
      SLIPWAY_HEALTH_TIMEOUT_SECONDS: '240',
    }),
    // Its static clients are not used: Slipway registers one of its own.
    startOidcServer({ redirectUris: ['http://unused.test/callback'], mcp: true }),
    launchChromium(),
  ]);
  [one, two] = await Promise.all([startMcpOAuthServer(idp), startMcpOAuthServer(idp)]);

  // An organization admin key: providers are the organization's.
  const { organization_id: organizationId } = await service.database.db
    .selectFrom('workspaces')
    .select('organization_id')
    .executeTakeFirstOrThrow();
  const key = newCredential('apiKey');
  await createApiKey(service.database.db, {
    organizationId,
    workspaceId: null,
    name: 'organization admin',
    role: 'admin',
    hash: key.hash,
    prefix: key.prefix,
  });
  orgApi = fetchApi(service.base, { key: key.value });

  // The agent is deployed meanwhile (awaited by the test): the build takes the longest.
  source = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-mcp-oauth-agent-'));
  await fs.cp(EXAMPLE, source, { recursive: true, filter: (from) => !from.includes('node_modules') });
  await fs.cp(path.join(FIXTURE, 'caller.mjs'), path.join(source, 'src', 'caller.mjs'));
  await fs.cp(path.join(FIXTURE, 'langgraph.json'), path.join(source, 'langgraph.json'));
  deployment = (async () => {
    const created = await service.api('POST', '/v2/deployments', {
      name: AGENT,
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: await uploadApp(service, source),
        framework_config_path: 'langgraph.json',
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const revisionId: string = created.body.latest_revision_id;
    const revision = await waitForRevision(service, created.body.id, revisionId, undefined, 600);
    const build = await revisionLog(service, created.body.id, revisionId, 'build');
    assert.equal(revision.status, 'DEPLOYED', `${JSON.stringify(revision)}\n${build.join('\n')}`);
    const url: string = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url;
    return { id: created.body.id as string, url };
  })();
  // Not left unhandled while the browser part runs: the test awaits it and sees its failure.
  deployment.catch(() => undefined);
});

after(async () => {
  await browser?.close();
  await service?.close();
  await Promise.all([one?.close(), two?.close(), idp?.close()]);
  if (source) await fs.rm(source, { recursive: true, force: true });
});

/** A run of the deployed graph `caller` through the app edge, as any client of the agent makes it. */
async function runAgent(url: string, input: Record<string, unknown>): Promise<{ answer: unknown; error: unknown }> {
  const ran = await requestApp(service, url, '/runs/wait', {
    method: 'POST',
    body: JSON.stringify({ assistant_id: 'caller', input }),
  });
  assert.equal(ran.status, 200, ran.body);
  return JSON.parse(ran.body) as { answer: unknown; error: unknown };
}

test('a person authorizes an MCP server in Chromium; the deployed agent calls its tool with the token Slipway gives it', async () => {
  // Registered by the MCP server's address alone: Slipway discovers the rest and registers a client.
  const created = await orgApi('POST', '/v2/auth/providers', {
    provider_id: 'whoami-mcp',
    name: 'Who-am-I MCP',
    provider_type: 'mcp',
    mcp_server_url: one.url,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.auth_url, `${idp.issuer}/auth`);
  assert.equal(created.body.is_dynamic_client, true);

  // The person: a workspace member's request starts the flow for the agent; they open the URL in a browser.
  const pending = await service.api('POST', '/v2/auth/authenticate', { provider_id: 'whoami-mcp', agent_id: AGENT });
  assert.equal(pending.status, 200, JSON.stringify(pending.body));
  assert.equal(pending.body.status, 'pending');
  const page = await (await browser.newContext()).newPage();
  await page.goto(pending.body.url as string);
  // oidc-provider's sign-in page, then its consent page (each a form with a hidden `prompt`).
  await page.locator('input[name="prompt"][value="login"]').waitFor({ state: 'attached' });
  await page.fill('input[name="login"]', 'alice');
  await page.fill('input[name="password"]', 'any password');
  await page.click('button[type="submit"]');
  await page.locator('input[name="prompt"][value="consent"]').waitFor({ state: 'attached' });
  await page.click('button[type="submit"]');
  // The authorization server sends the browser back to Slipway, which says it worked.
  await page.waitForURL((address) => address.href.startsWith(`${service.base}/v2/auth/callback/whoami-mcp?`));
  assert.equal(await page.locator('h1').textContent(), 'Authorization complete');
  await page.context().close();

  const waited = await service.api('GET', `/v2/auth/wait/${pending.body.auth_id}?timeout=5`);
  assert.equal(waited.body.status, 'completed', JSON.stringify(waited.body));
  const connectionId = waited.body.connection_id as string;
  assert.ok(connectionId, 'the agent was connected to the token');

  // The deployed agent: its graph asks Slipway for the token and calls the tool; the answer is its output.
  const { url } = await deployment;
  const callsBefore = one.calls();
  const ran = await runAgent(url, { agent_id: AGENT, connection_id: connectionId, mcp_url: one.url });
  assert.deepEqual(ran, {
    agent_id: AGENT,
    connection_id: connectionId,
    mcp_url: one.url,
    answer: 'alice',
    error: null,
  });
  assert.equal(one.calls(), callsBefore + 1, 'the MCP server answered the tool call');

  // Attacker's test: the same token sent to another MCP server of the same authorization server is
  // refused there, by its bearer middleware's audience check; its tool never runs.
  const refusedBefore = two.refused();
  const elsewhere = await runAgent(url, { agent_id: AGENT, connection_id: connectionId, mcp_url: two.url });
  assert.equal(elsewhere.answer, null);
  assert.match(String(elsewhere.error), /^The MCP server refused: .*(401|invalid_token)/);
  assert.ok(two.refused() > refusedBefore, 'the second server refused the token');
  assert.equal(two.calls(), 0);

  // And the agent's credential reaches its own agents only: a connection asked for under another agent id is 403.
  const other = await runAgent(url, { agent_id: 'support-bot', connection_id: connectionId, mcp_url: one.url });
  assert.equal(other.answer, null);
  assert.match(String(other.error), /^Slipway answered 403/);
});
