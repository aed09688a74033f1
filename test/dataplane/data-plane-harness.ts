/**
 * A real service for data plane tests: the API and the app proxy listening on a real port, the change
 * feed, and the worker with the local runtime (bubblewrap when installed), on a database cloned from
 * the template. Plus helpers to pack an app folder, upload it, and wait for a revision to settle.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import * as tar from 'tar';
import type { Config } from '../../src/config.ts';
import type { SecretBox } from '../../src/crypto/secret-box.ts';
import type { ChangeFeed } from '../../src/db/change-feed.ts';
import type { AppEdge } from '../../src/dataplane/app-edge.ts';
import type { LocalDataPlane } from '../../src/dataplane/local-data-plane.ts';
import {
  ADMIN_KEY,
  createTestApp,
  dropAppDatabases,
  fetchApi,
  freePort,
  listen,
  startDataPlane,
  type FetchApi,
  type TestDatabase,
} from '../support/harness.ts';
import { eventually } from '../support/wait.ts';

export const FINAL = [
  'CREATE_FAILED',
  'BUILD_FAILED',
  'DEPLOY_FAILED',
  'DEPLOYED',
  'SKIPPED',
  'INTERRUPTED',
  'UNKNOWN',
];

export interface TestService {
  base: string;
  port: number;
  config: Config;
  database: TestDatabase;
  /** The key the service seals secrets and credentials with. */
  secretBox: SecretBox;
  dataDir: string;
  app: FastifyInstance;
  /** The edge that serves the apps (nginx when installed); apps are at their custom_url on it. */
  edge: AppEdge;
  changes: ChangeFeed;
  worker: LocalDataPlane | null;
  api: FetchApi;
  /** Starts the worker (again, after stopWorker). */
  startWorker(): Promise<void>;
  stopWorker(): Promise<void>;
  close(): Promise<void>;
}

export async function startTestService(env: Record<string, string> = {}): Promise<TestService> {
  const port = await freePort();
  /** The worker, once started: /metrics reads its apps. */
  let running: LocalDataPlane | null = null;
  const t = await createTestApp(
    { PORT: String(port), SLIPWAY_HEALTH_TIMEOUT_SECONDS: '30', SLIPWAY_DRAIN_SECONDS: '3', ...env },
    {
      changes: true,
      edge: true,
      // Per-deployment metrics on /metrics, as main.ts gives them.
      apps: async () =>
        t.edge === null
          ? null
          : {
              edge: await t.edge.stats(),
              runtime: (await running?.appStats()) ?? [],
              traffic: t.edge.traffic.totals(),
              requestLog: t.edge.requestLogCounts(),
            },
    },
  );
  const { app, config, database, dataDir } = t;
  const changes = t.changes!;
  const edge = t.edge!;
  // The sandboxed app user must be able to pass through (never list) the data directory.
  await fs.chmod(dataDir, 0o711);
  const base = await listen(app, port);

  const service: TestService = {
    base,
    port,
    config,
    database,
    secretBox: t.secretBox,
    dataDir,
    app,
    edge,
    changes,
    worker: null,
    api: fetchApi(base),
    async startWorker() {
      service.worker = await startDataPlane(t);
      running = service.worker;
    },
    async stopWorker() {
      await service.worker?.stop();
      service.worker = null;
      running = null;
    },
    async close() {
      await service.stopWorker();
      await dropAppDatabases(database);
      await t.close();
    },
  };
  await service.startWorker();
  return service;
}

/** Packs a folder (or a map of files) into a .tar.gz and uploads it; the source_tarball_path. */
export async function uploadApp(
  service: Pick<TestService, 'base'>,
  files: Record<string, string> | string,
  key: string = ADMIN_KEY,
): Promise<string> {
  const dir = typeof files === 'string' ? files : await writeApp(files);
  const archive = path.join(os.tmpdir(), `slipway-app-${randomBytes(4).toString('hex')}.tar.gz`);
  await tar.c({ gzip: true, file: archive, cwd: dir, portable: true }, await fs.readdir(dir));
  try {
    const response = await fetch(`${service.base}/v2/uploads`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/gzip' },
      body: await fs.readFile(archive),
    });
    const body = (await response.json()) as { source_tarball_path: string };
    if (response.status !== 201) throw new Error(`upload failed: ${response.status} ${JSON.stringify(body)}`);
    return body.source_tarball_path;
  } finally {
    await fs.rm(archive, { force: true });
  }
}

export async function writeApp(files: Record<string, string>): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-src-'));
  for (const [name, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
    await fs.writeFile(path.join(dir, name), content);
  }
  return dir;
}

/** An app deployed from an upload of its files: its deployment, first revision and stable URL. */
export interface DeployedApp {
  id: string;
  revisionId: string;
  url: string;
}

/** Uploads `files`, creates the internal_source deployment `name` from them and waits for it to be DEPLOYED. */
export async function deployApp(
  service: TestService,
  files: Record<string, string> | string,
  name: string,
): Promise<DeployedApp> {
  const tarball = await uploadApp(service, files);
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  if (created.status !== 201)
    throw new Error(`POST /v2/deployments: ${created.status} ${JSON.stringify(created.body)}`);
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  if (revision.status !== 'DEPLOYED') throw new Error(`${name} was not deployed: ${JSON.stringify(revision)}`);
  const url: string = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url;
  return { id: created.body.id, revisionId: created.body.latest_revision_id, url };
}

/** Polls the revision until it reaches one of `statuses` (default: any final state); a hang guard of `seconds`. */
export async function waitForRevision(
  service: TestService,
  deploymentId: string,
  revisionId: string,
  statuses: string[] = FINAL,
  seconds?: number,
): Promise<any> {
  let last: any;
  return eventually(
    `revision ${revisionId} to reach ${statuses.join('|')}`,
    async () => {
      const response = await service.api('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`);
      last = response.body;
      return response.status === 200 && statuses.includes(last.status) && last;
    },
    { seconds, everyMs: 200, describe: () => `last seen ${JSON.stringify(last)}` },
  );
}

/** A request to an app through the service's proxy by host name (`<slug>.localhost`). */
export function requestApp(
  service: TestService,
  hostUrl: string,
  pathname: string,
  options: { method?: string; body?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: string }> {
  // The app's host name, sent to the edge on this machine (*.localhost need not resolve here).
  const { host, port } = new URL(hostUrl);
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port: Number(port) || service.edge.port,
        path: pathname,
        method: options.method ?? 'GET',
        headers: { ...options.headers, host, ...(options.body ? { 'content-type': 'application/json' } : {}) },
      },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    if (options.body) request.write(options.body);
    request.end();
  });
}

/** The log lines of a revision, through the API. */
export async function revisionLog(
  service: TestService,
  deploymentId: string,
  revisionId: string,
  type: 'build' | 'deploy',
): Promise<string[]> {
  const lines: string[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 50; page++) {
    const response = await service.api(
      'GET',
      `/v2/deployments/${deploymentId}/revisions/${revisionId}/logs?type=${type}&limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    if (response.status !== 200) throw new Error(`logs: ${response.status} ${JSON.stringify(response.body)}`);
    const got = response.body.lines as { message: string }[];
    lines.push(...got.map((l) => l.message));
    if (got.length === 0) break;
    cursor = response.body.next_cursor;
  }
  return lines;
}

/**
 * The node processes of this machine run with `marker` among their arguments (a sandbox's processes are
 * visible from the host; the shells and the bubblewrap whose command lines name them are not counted).
 */
export async function processesMarked(marker: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = (await fs.readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (path.basename(argv[0] ?? '') === 'node' && argv.includes(marker) && Number(entry) !== process.pid)
      found.push(Number(entry));
  }
  return found;
}

export const pathExists = (file: string): Promise<boolean> =>
  fs.lstat(file).then(
    () => true,
    () => false,
  );

/**
 * Watches, until `stop` is called, for any moment at which a process marked `marker` still runs while
 * `sentinel` (a file in the tree it writes) is gone: the tree being removed under a live app. Resolves to
 * those moments, described.
 */
export function watchRemovalRace(marker: string, sentinel: string): { stop(): Promise<string[]> } {
  const raced: string[] = [];
  let stopped = false;
  const watching = (async () => {
    while (!stopped) {
      // The sentinel first, then the processes: a process seen after its tree was seen going ran while
      // it went (the other order would count one that was listed, then ended, before the removal).
      const going = !(await pathExists(sentinel));
      const alive = going ? await processesMarked(marker) : [];
      if (alive.length > 0) raced.push(`processes ${alive.join(' ')} ran while their tree was removed`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await watching;
      return raced;
    },
  };
}

/**
 * A directory of the host full of files that no app may make the service remove: an attacker's target,
 * named to the app (in a secret) as where to point its links.
 */
export interface Canary {
  dir: string;
  /** Fails, naming `when`, unless every file is still there. */
  assertIntact(when: string): Promise<void>;
  remove(): Promise<void>;
}

export async function makeCanary(files: number): Promise<Canary> {
  const root = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-canary-')));
  const dir = path.join(root, 'canary');
  await fs.mkdir(dir);
  for (let i = 0; i < files; i++) await fs.writeFile(path.join(dir, `keep-${i}`), 'keep');
  return {
    dir,
    async assertIntact(when) {
      const left = (await fs.readdir(dir)).length;
      if (left !== files) throw new Error(`${when}: canary files left: ${left} of ${files}`);
    },
    remove: () => fs.rm(root, { recursive: true, force: true }),
  };
}

/** The files of a Node.js app of one module (`server.js`, started by `npm start`) with its slipway.json. */
export function oneFileApp(
  server: string,
  slipway: Record<string, unknown>,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    'package.json': JSON.stringify({
      name: 'tiny',
      private: true,
      type: 'module',
      scripts: { start: 'node server.js' },
    }),
    'server.js': server,
    'slipway.json': JSON.stringify(slipway),
    ...extra,
  };
}
