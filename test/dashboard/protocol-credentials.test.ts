/**
 * A LangGraph deployment's page in a real browser: its MCP and A2A addresses, and its protocol
 * credentials (docs/langgraph.md, "Who may call MCP and A2A"): an admin creates one, sees it once,
 * and revokes it; the value shown is the credential the service accepts, and after the revoke it does
 * not. A member key sees the list and the service's refusal when it tries to create one. A deployment
 * of another kind shows neither.
 *
 * The LangGraph project is examples/langgraph-js, built and run on the service's own data plane (its
 * stable URL is set when it first serves); the other app is an image deployment.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { ADMIN_KEY } from '../support/harness.ts';
import { startTestService, uploadApp, waitForRevision, type TestService } from '../dataplane/data-plane-harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage, screenshots } from './browser.ts';
import { test } from '../support/limited-test.ts';

const PAGE_DEADLINE_MS = 30_000;

describe('dashboard: MCP and A2A of a deployment', () => {
  let service: TestService;
  let browser: Browser;
  let page: Page;
  let graphId: string;
  let graphUrl: string;
  let plainId: string;
  let agentCredential: string;
  let memberKey: string;
  let source: string;

  before(async () => {
    await ensureDashboardBuilt();
    service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '240' });
    // The example LangGraph project, deployed: its stable URL is set when it first serves. The build
    // installs from the npm registry: a minute or two.
    source = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-dashboard-graph-'));
    await fs.cp('examples/langgraph-js', source, { recursive: true, filter: (from) => !from.includes('node_modules') });
    const graph = await service.api('POST', '/v2/deployments', {
      name: 'graph-agent',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: await uploadApp(service, source),
        framework_config_path: 'langgraph.json',
      },
    });
    assert.equal(graph.status, 201, JSON.stringify(graph.body));
    graphId = graph.body.id;
    const revision = await waitForRevision(service, graphId, graph.body.latest_revision_id, undefined, 600);
    assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    graphUrl = (await service.api('GET', `/v2/deployments/${graphId}`)).body.source_config.custom_url;
    assert.ok(graphUrl);
    // Another kind of app: no LangGraph project, so no MCP or A2A.
    const plain = await service.api('POST', '/v2/deployments', {
      name: 'plain-app',
      source: 'internal_container',
      source_revision_config: { image_uri: 'reg.example.com/plain:1' },
    });
    assert.equal(plain.status, 201, JSON.stringify(plain.body));
    plainId = plain.body.id;
    // What the deployment's server asks the service with, to check a caller's credential.
    const minted = await service.api('POST', `/v2/deployments/${graphId}/agent-credentials`, {
      agent_ids: ['graph-agent'],
    });
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    agentCredential = minted.body.credential;
    const member = await service.api('POST', '/v2/api-keys', { name: 'viewer', role: 'member' });
    assert.equal(member.status, 201, JSON.stringify(member.body));
    memberKey = member.body.key;
    browser = await launchChromium();
    page = await openPage(browser);
    page.setDefaultTimeout(PAGE_DEADLINE_MS);
  });

  after(async () => {
    await browser?.close();
    await service?.close();
    if (source) await fs.rm(source, { recursive: true, force: true });
  });

  const signIn = async (key: string) => {
    await page.goto(`${service.base}/`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  };

  /** The deployment's server's check of a caller's credential (POST /v2/auth/protocol-credentials/verify). */
  const accepted = async (credential: string): Promise<boolean> => {
    const response = await fetch(`${service.base}/v2/auth/protocol-credentials/verify`, {
      method: 'POST',
      headers: { authorization: `Bearer ${agentCredential}`, 'content-type': 'application/json' },
      body: JSON.stringify({ credential }),
    });
    assert.equal(response.status, 200);
    return ((await response.json()) as { valid: boolean }).valid;
  };

  test('an admin sees the MCP and A2A addresses, creates a credential shown once, and revokes it', async () => {
    await signIn(ADMIN_KEY);
    await page.goto(`${service.base}/deployments/${graphId}`);
    await page.getByRole('heading', { name: 'graph-agent' }).waitFor();
    const addresses = page.locator('dt', { hasText: 'MCP and A2A' }).locator('xpath=following-sibling::dd');
    // The addresses come with the deployment's own data, which the page may still be loading under its heading.
    await addresses.locator('code').first().waitFor();
    assert.deepEqual(await addresses.locator('code').allTextContents(), [
      `${graphUrl}/mcp`,
      `${graphUrl}/a2a/{assistant_id}`,
      `${graphUrl}/.well-known/agent-card.json?assistant_id={assistant_id}`,
    ]);

    const panel = page.getByRole('region', { name: 'MCP and A2A credentials' });
    await panel.getByText('No protocol credentials.').waitFor();
    await panel.getByLabel('Credential name').fill('claude-desktop');
    await panel.getByRole('button', { name: 'Create credential' }).click();
    const shown = panel.getByLabel('The new protocol credential');
    await shown.waitFor();
    const credential = (await shown.textContent())!.trim();
    assert.match(credential, /^slwp_/);
    const row = panel.getByRole('row', { name: /claude-desktop/ });
    await row.waitFor();
    assert.equal(await row.getByText(`${credential.slice(0, 8)}`, { exact: false }).count(), 1);
    await screenshots(page, 'protocol-credentials');
    // The value on screen is the credential the deployment's server is told is valid.
    assert.equal(await accepted(credential), true);

    await panel.getByRole('button', { name: 'I have kept it' }).click();
    assert.equal(await panel.getByLabel('The new protocol credential').count(), 0, 'never shown again');
    await panel.getByRole('button', { name: 'Revoke claude-desktop' }).click();
    await row.getByText('revoked').waitFor();
    assert.equal(await accepted(credential), false);
    assert.equal(
      (await service.api('GET', `/v2/deployments/${graphId}/protocol-credentials`)).body.resources[0].revoked_at !==
        null,
      true,
    );
  });

  test("a member sees the list and the service's refusal to create one; another kind of app shows neither", async () => {
    // Another person's browser: a tab of its own.
    await page.context().close();
    page = await openPage(browser);
    page.setDefaultTimeout(PAGE_DEADLINE_MS);
    await signIn(memberKey);
    await page.goto(`${service.base}/deployments/${graphId}`);
    const panel = page.getByRole('region', { name: 'MCP and A2A credentials' });
    await panel.getByRole('row', { name: /claude-desktop/ }).waitFor();
    await panel.getByRole('button', { name: 'Create credential' }).click();
    const alert = panel.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /admin/i);
    assert.equal(
      (await service.api('GET', `/v2/deployments/${graphId}/protocol-credentials`)).body.resources.length,
      1,
      'nothing was made',
    );

    await page.goto(`${service.base}/deployments/${plainId}`);
    await page.getByRole('heading', { name: 'plain-app' }).waitFor();
    await page.getByRole('heading', { name: 'Revisions' }).waitFor();
    assert.equal(await page.getByRole('region', { name: 'MCP and A2A credentials' }).count(), 0);
    assert.equal(await page.locator('dt', { hasText: 'MCP and A2A' }).count(), 0);
  });
});
