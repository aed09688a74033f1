/**
 * The agent as a user runs it: the `slipway-listener` command, configured by environment with a
 * kubeconfig file, deploys a revision and stops cleanly on SIGTERM (as Kubernetes stops a pod).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { NAMESPACE, deployment, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('the slipway-listener command', { timeout: 120_000 }, () => {
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

  test('deploys from a kubeconfig file and exits 0 on SIGTERM', async () => {
    const kubeconfig = path.join(dir, 'kubeconfig');
    await fs.writeFile(kubeconfig, world.kube.kubeConfig().exportConfig());
    const d = deployment({ name: 'from-the-command' });
    world.slipway.upsert(d);

    const child = spawn(path.join(ROOT, 'listener/bin.mjs'), [], {
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
    world.kube.markAvailable(NAMESPACE, 'from-the-command');
    await world.slipway.waitFor(() =>
      world.slipway.reports.some((r) => r.revision_id === d.revision!.id && r.status === 'DEPLOYED'),
    );
    assert.ok(world.slipway.heartbeats.length > 0);

    child.kill('SIGTERM');
    assert.equal(await exited, 0, output);
    assert.match(output, /"msg":"listener stopped"/);
    assert.doesNotMatch(output, new RegExp(world.config.credential), 'the credential never reaches the log');
    assert.doesNotMatch(output, /sk-test/, 'nor do the secrets');
  });
});
