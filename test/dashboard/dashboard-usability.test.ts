/**
 * What a user notices of the dashboard beyond its main flow: the deployments list is newest first and
 * pages forward and back; signing in and opening a deployment work with the keyboard alone; at phone
 * width no main page scrolls sideways; a listener whose agent sent a heartbeat shows as connected.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { ADMIN_KEY } from '../support/harness.ts';
import { startTestService, type TestService } from '../dataplane/data-plane-harness.ts';
import { ensureDashboardBuilt, launchChromium, openPage } from './browser.ts';
import { test } from '../support/limited-test.ts';

const PAGE_DEADLINE_MS = 30_000;
/** One more than a page of the list (20). */
const DEPLOYMENTS = 22;
const name = (i: number) => `agent-${String(i).padStart(2, '0')}`;
const LONG_NAME = 'a-support-agent-with-a-name-as-long-as-a-dns-label-may-be-0123';

describe('dashboard usability', () => {
  let service: TestService;
  let browser: Browser;
  let page: Page;
  let longId: string;

  before(async () => {
    await ensureDashboardBuilt();
    service = await startTestService();
    // Nothing here builds or runs an app.
    await service.stopWorker();
    // Deployments without a source: made at once, with no revision to build.
    for (let i = 0; i < DEPLOYMENTS; i++) {
      const created = await service.api('POST', '/v2/deployments', {
        name: name(i),
        source: 'internal_source',
        source_config: {},
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
    }
    const long = await service.api('POST', '/v2/deployments', {
      name: LONG_NAME,
      source: 'internal_source',
      source_config: {},
      secrets: [{ name: 'AN_UNUSUALLY_LONG_SECRET_NAME_THAT_COULD_PUSH_THE_PAGE_WIDE', value: 'x' }],
    });
    assert.equal(long.status, 201, JSON.stringify(long.body));
    longId = long.body.id;
    browser = await launchChromium();
    page = await openPage(browser);
    page.setDefaultTimeout(PAGE_DEADLINE_MS);
  });

  after(async () => {
    await browser?.close();
    await service?.close();
  });

  /** Presses Tab until the focused element matches, as a keyboard user would; fails after `max` presses. */
  const tabTo = async (what: string, matches: () => boolean, max = 60) => {
    for (let i = 0; i < max; i++) {
      await page.keyboard.press('Tab');
      if (await page.evaluate(matches)) return;
    }
    assert.fail(`${what} was not reached with Tab within ${max} presses`);
  };

  test('sign in and open a deployment with the keyboard only', async () => {
    await page.goto(`${service.base}/`);
    await page.getByRole('heading', { name: 'Sign in to Slipway' }).waitFor();
    await tabTo('the API key field', () => document.activeElement?.id === 'api-key');
    await page.keyboard.type(ADMIN_KEY);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Deployments' }).waitFor();
    await page.getByRole('link', { name: name(DEPLOYMENTS - 1), exact: true }).waitFor();

    await tabTo(
      `the link to ${LONG_NAME}`,
      () =>
        (document.activeElement as HTMLElement | null)?.textContent ===
        'a-support-agent-with-a-name-as-long-as-a-dns-label-may-be-0123',
    );
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: LONG_NAME }).waitFor();
    assert.equal(new URL(page.url()).pathname, `/deployments/${longId}`);
  });

  test('the deployments list is newest first, and pages to older ones and back', async () => {
    await page.goto(`${service.base}/deployments`);
    const names = async () => {
      await page.locator('table.list tbody tr').first().waitFor();
      return page.locator('table.list tbody th a').allInnerTexts();
    };
    const newestFirst = [LONG_NAME, ...Array.from({ length: DEPLOYMENTS }, (_, i) => name(DEPLOYMENTS - 1 - i))];
    assert.deepEqual(await names(), newestFirst.slice(0, 20));

    await page.getByRole('button', { name: 'Older' }).click();
    await page.waitForURL(/offset=20/);
    await page.getByRole('link', { name: name(0), exact: true }).waitFor();
    assert.deepEqual(await names(), newestFirst.slice(20));
    assert.equal(await page.getByRole('button', { name: 'Older' }).isDisabled(), true, 'no page after the last');

    await page.getByRole('button', { name: 'Newer' }).click();
    await page.getByRole('link', { name: LONG_NAME, exact: true }).waitFor();
    assert.deepEqual(await names(), newestFirst.slice(0, 20));
    assert.equal(await page.getByRole('button', { name: 'Newer' }).isDisabled(), true, 'the first page has no newer');
  });

  test('at phone width no main page scrolls sideways', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      const pages: [string, string][] = [
        ['/deployments', 'Deployments'],
        [`/deployments/${longId}`, LONG_NAME],
        ['/deployments/new', 'New deployment'],
        ['/listeners', 'Listeners'],
        ['/integrations', 'Code hosts'],
        ['/api-keys', 'API keys'],
      ];
      for (const [path, heading] of pages) {
        await page.goto(`${service.base}${path}`);
        await page.getByRole('heading', { name: heading, exact: true }).waitFor();
        const { scrollWidth, clientWidth, overflowing } = await page.evaluate(() => {
          const screen = document.scrollingElement!;
          // What sticks out, to name in the failure: elements past the right edge whose parent is not.
          // (No named function in here: the test's transpiler would wrap it in a helper the page lacks.)
          const overflowing = [...document.querySelectorAll('body *')]
            .filter(
              (e) =>
                e.getBoundingClientRect().right > screen.clientWidth &&
                (e.parentElement?.getBoundingClientRect().right ?? 0) <= screen.clientWidth,
            )
            .map((e) => `<${e.tagName.toLowerCase()} class="${e.className}">${(e.textContent ?? '').slice(0, 30)}`)
            .slice(0, 5);
          return { scrollWidth: screen.scrollWidth, clientWidth: screen.clientWidth, overflowing };
        });
        assert.ok(
          scrollWidth <= clientWidth,
          `${path} is ${scrollWidth} px wide in a ${clientWidth} px screen: ${overflowing.join(', ')}`,
        );
      }
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
  });

  test("a listener shows never seen, then connected once its agent's heartbeat came", async () => {
    const listener = await service.api('POST', '/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'prod-eu-1',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    assert.equal(listener.status, 201, JSON.stringify(listener.body));
    const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: /prod-eu-1/ }) });

    await page.goto(`${service.base}/listeners`);
    await row.waitFor();
    assert.match(await row.innerText(), /never seen/);

    const credential = await service.api('POST', `/v2/listeners/${listener.body.id}/credentials`);
    assert.equal(credential.status, 201, JSON.stringify(credential.body));
    const heartbeat = await fetch(`${service.base}/v2/listeners/${listener.body.id}/heartbeat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${credential.body.credential}`, 'content-type': 'application/json' },
      body: JSON.stringify({ version: '0.1.0', namespaces: ['agents'] }),
    });
    assert.equal(heartbeat.status, 200, await heartbeat.text());

    await page.reload();
    await row.getByText('connected', { exact: true }).waitFor();
    assert.doesNotMatch(await row.innerText(), /never seen/);
  });
});
