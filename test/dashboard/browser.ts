/**
 * Chromium for the dashboard tests (playwright-core drives the system's Chromium: Debian's package at
 * /usr/bin/chromium, which .ci/run installs), the built pages, and screenshots of what a user sees at
 * laptop and phone widths, written to test-results/screenshots/ (git-ignored) for a person to look at.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { DIST_DIR, WEB_DIR, buildDashboard, dashboardBuilt } from '../../web/build.ts';

export const SCREENSHOT_DIR = path.resolve('test-results', 'screenshots');

const VIEWPORTS = {
  laptop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
};

/** When the newest source of the pages (web/src, index.html, the Vite config) was changed. */
async function sourcesChangedAt(): Promise<number> {
  const files = [path.join(WEB_DIR, 'index.html'), path.join(WEB_DIR, 'vite.config.ts')];
  for (const entry of await fs.readdir(path.join(WEB_DIR, 'src'), { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) files.push(path.join(entry.parentPath, entry.name));
  }
  const stats = await Promise.all(files.map((file) => fs.stat(file)));
  return Math.max(...stats.map((stat) => stat.mtimeMs));
}

/**
 * The tests drive the pages as built from the current sources: `npm ci` builds them (prepare), and
 * they are built again here when missing or older than a source (an edit since). Test files run in
 * parallel processes: each builds into a directory of its own and swaps it in by renames, so a page is
 * never served half-written.
 */
export async function ensureDashboardBuilt(): Promise<void> {
  const builtAt = await fs.stat(path.join(DIST_DIR, 'index.html')).then(
    (stat) => stat.mtimeMs,
    () => null,
  );
  if (builtAt !== null && builtAt >= (await sourcesChangedAt())) return;
  const staging = `${DIST_DIR}.${process.pid}`;
  const previous = `${DIST_DIR}.${process.pid}.old`;
  await buildDashboard(staging);
  await fs.rename(DIST_DIR, previous).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'ENOENT') throw error;
  });
  try {
    await fs.rename(staging, DIST_DIR);
  } catch (error) {
    // Another test process swapped its own fresh build in meanwhile: that one serves.
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
  }
  await Promise.all([previous, staging].map((dir) => fs.rm(dir, { recursive: true, force: true })));
  if (!(await dashboardBuilt())) throw new Error(`${DIST_DIR} holds no index.html: run \`npm run build:web\``);
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-background-networking',
      '--disable-gpu',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** A page at laptop width whose dialogs (confirm before redeploy, revoke) are answered yes. */
export async function openPage(browser: Browser): Promise<Page> {
  const context = await browser.newContext({ viewport: VIEWPORTS.laptop });
  const page = await context.newPage();
  page.on('dialog', (dialog) => void dialog.accept());
  return page;
}

/** Screenshots of the page as it is, at laptop then phone width (`<name>-laptop.png`, `<name>-phone.png`). */
export async function screenshots(page: Page, name: string): Promise<void> {
  await fs.mkdir(SCREENSHOT_DIR, { recursive: true });
  for (const [size, viewport] of Object.entries(VIEWPORTS)) {
    await page.setViewportSize(viewport);
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}-${size}.png`), fullPage: true });
  }
  await page.setViewportSize(VIEWPORTS.laptop);
}
