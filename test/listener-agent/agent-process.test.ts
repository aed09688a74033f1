/**
 * The agent as a user runs it, configured by environment with a kubeconfig file: it deploys a revision
 * and stops cleanly on SIGTERM (as Kubernetes stops a pod). Twice: the `slipway-listener` command of a
 * clone (the TypeScript through tsx), and the bundle the image runs (`node listener.mjs`, built by
 * `npm run build:listener`, beside only the packages the image installs: listener-bundle.ts).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { NAMESPACE, deployment, startWorld, type World } from './harness.ts';
import { buildListenerImage } from './listener-bundle.ts';
import { test } from '../support/limited-test.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('the agent as a process', { timeout: 120_000 }, () => {
  let world: World;
  let dir: string;
  before(async () => {
    world = await startWorld();
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-listener-'));
  });
  after(async () => {
    await world.close();
    await fs.rm(dir, { recursive: true, force: true });
  });

  /** Starts `command`, deploys a revision of `name` through it, and stops it with SIGTERM: its heartbeats. */
  async function deploysAndStops(
    command: string,
    args: string[],
    name: string,
  ): Promise<World['slipway']['heartbeats']> {
    const kubeconfig = path.join(dir, 'kubeconfig');
    await fs.writeFile(kubeconfig, world.kube.kubeConfig().exportConfig());
    const d = deployment({ name });
    world.slipway.upsert(d);
    const heartbeatsBefore = world.slipway.heartbeats.length;

    const child = spawn(command, args, {
      env: {
        PATH: process.env.PATH,
        SLIPWAY_URL: world.slipway.url,
        SLIPWAY_LISTENER_ID: world.config.listenerId,
        SLIPWAY_LISTENER_CREDENTIAL: world.config.credential,
        SLIPWAY_LISTENER_NAMESPACES: NAMESPACE,
        KUBECONFIG: kubeconfig,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));

    await world.slipway.waitFor(() =>
      world.slipway.reports.some((r) => r.revision_id === d.revision!.id && r.status === 'DEPLOYING'),
    );
    world.kube.markAvailable(NAMESPACE, name);
    await world.slipway.waitFor(() =>
      world.slipway.reports.some((r) => r.revision_id === d.revision!.id && r.status === 'DEPLOYED'),
    );
    await world.slipway.waitFor(() => world.slipway.heartbeats.length > heartbeatsBefore);

    child.kill('SIGTERM');
    assert.equal(await exited, 0, output);
    assert.match(output, /"msg":"listener stopped"/);
    assert.doesNotMatch(output, new RegExp(world.config.credential), 'the credential never reaches the log');
    assert.doesNotMatch(output, /sk-test/, 'nor do the secrets');
    return world.slipway.heartbeats.slice(heartbeatsBefore);
  }

  test('the slipway-listener command deploys from a kubeconfig file and exits 0 on SIGTERM', async () => {
    await deploysAndStops(path.join(ROOT, 'packages/listener/bin.mjs'), [], 'from-the-command');
  });

  test("the image's bundle, on the image's packages only, deploys and exits 0 on SIGTERM", async () => {
    const image = await buildListenerImage(path.join(dir, 'image'));
    const heartbeats = await deploysAndStops(
      process.execPath,
      ['--enable-source-maps', image.bundle],
      'from-the-bundle',
    );
    // The version the heartbeat tells is the package's, built into the bundle.
    const { version } = JSON.parse(await fs.readFile(path.join(ROOT, 'packages/listener/package.json'), 'utf8')) as {
      version: string;
    };
    assert.deepEqual(new Set(heartbeats.map((h) => h.version)), new Set([version]));
  });
});
