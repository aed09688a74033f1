/**
 * The world of an end-to-end listener test: the real service (the API with its change feed, on a real
 * port, on a database cloned from the test template), the fake Kubernetes API server of
 * test/listener-agent/fake-kube.ts on another real port (the only fake: it stands for the cluster), and
 * listener agents as real child processes, started the way a user starts one outside a cluster:
 * packages/listener/src/main.ts (the run's bundle of it: scripts/test-bundles.ts, entryCommand) with a
 * kubeconfig file and the SLIPWAY_* variables.
 *
 * Waits poll the API (as a user would with curl) until a condition holds. Their deadline only exists
 * so that a hung test fails with what it last saw instead of hanging: it is not a timing assertion.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { entryCommand } from '../../scripts/test-bundles.ts';
import { FakeKube, type FakeKubeOptions } from '../listener-agent/fake-kube.ts';
import { createTestApp, fetchApi, listen, registerListener, ROOT, type FetchApi } from '../support/harness.ts';
import { eventually } from '../support/wait.ts';

export const NAMESPACE = 'agents';

/** A listener agent process. */
export interface AgentProcess {
  /** stdout and stderr so far (JSON log lines), for failure messages and log checks. */
  output(): string;
  /** SIGKILL: the process dies on the spot, mid-request if it is in one (a crash, an OOM kill, a node lost). */
  kill(): Promise<void>;
  /** SIGTERM, as Kubernetes stops a pod; resolves with the exit code. */
  stop(): Promise<number | null>;
}

export interface E2eWorld {
  /** http://127.0.0.1:<port> of the service. */
  base: string;
  kube: FakeKube;
  /** The service's API with the admin key, over real HTTP. */
  api: FetchApi;
  /** Registers a listener and makes its credential, as docs/listener.md's steps 1 and 2 do. */
  registerListener(namespaces?: string[]): Promise<{ id: string; credential: string }>;
  /** Starts an agent process for the listener (the world stops it at the end if the test did not). */
  startAgent(
    listener: { id: string; credential: string },
    namespaces?: string[],
    /** More of the agent's environment (SLIPWAY_LISTENER_HEARTBEAT_SECONDS, ...). */
    env?: Record<string, string>,
  ): AgentProcess;
  close(): Promise<void>;
}

/** The listener resource once its agent's first heartbeat arrived. */
export function firstHeartbeat(world: E2eWorld, listenerId: string, agent: AgentProcess) {
  return eventually(
    'the first heartbeat',
    async () => {
      const l = await world.api('GET', `/v2/listeners/${listenerId}`);
      return l.body.agent_version !== null && l.body;
    },
    { describe: () => agent.output() },
  );
}

/** `cluster`: how the fake API server behaves (an older Kubernetes version, say). */
export async function startE2eWorld(cluster: FakeKubeOptions = {}): Promise<E2eWorld> {
  // The change feed wakes the long-polls at once, as in production (without it they re-read every second).
  const service = await createTestApp({}, { changes: true });
  let base: string;
  try {
    base = await listen(service.app);
  } catch (error) {
    await service.close();
    throw error;
  }
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-listener-e2e-'));
  const kube = await FakeKube.start({ namespaces: [NAMESPACE], ...cluster });
  // What a user has for a cluster they reach from outside: a kubeconfig file.
  const kubeconfig = path.join(dir, 'kubeconfig');
  await fs.writeFile(kubeconfig, kube.kubeConfig().exportConfig());
  const agents = new Set<ChildProcess>();
  let compute = 0;

  const api = fetchApi(base);

  return {
    base,
    kube,
    api,

    async registerListener(namespaces = [NAMESPACE]) {
      const { id, credential } = await registerListener(
        (url, body) => api('POST', url, body),
        `e2e-${process.pid}-${++compute}`,
        namespaces,
      );
      return { id, credential };
    },

    startAgent(listener, namespaces = [NAMESPACE], env = {}) {
      const child = spawn(process.execPath, entryCommand('packages/listener/src/main.ts'), {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH,
          SLIPWAY_URL: base,
          SLIPWAY_LISTENER_ID: listener.id,
          SLIPWAY_LISTENER_CREDENTIAL: listener.credential,
          SLIPWAY_LISTENER_NAMESPACES: namespaces.join(','),
          KUBECONFIG: kubeconfig,
          LOG_LEVEL: 'debug',
          ...env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      agents.add(child);
      let output = '';
      const record = (chunk: Buffer) => {
        output += chunk.toString();
        // LISTENER_TEST_LOG=1 shows the agents' logs, as test/listener-agent's harness does for in-process agents.
        if (process.env.LISTENER_TEST_LOG) process.stderr.write(chunk);
      };
      child.stdout.on('data', record);
      child.stderr.on('data', record);
      const exited = new Promise<number | null>((resolve) =>
        child.once('exit', (code) => {
          agents.delete(child);
          resolve(code);
        }),
      );
      return {
        output: () => output,
        async kill() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
          await exited;
        },
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          return exited;
        },
      };
    },

    async close() {
      await Promise.all(
        [...agents].map(
          (child) =>
            new Promise<void>((resolve) => {
              if (child.exitCode !== null || child.signalCode !== null) return resolve();
              child.once('exit', () => resolve());
              child.kill('SIGKILL');
            }),
        ),
      );
      await service.close();
      await kube.close();
      await fs.rm(dir, { recursive: true, force: true });
    },
  };
}
