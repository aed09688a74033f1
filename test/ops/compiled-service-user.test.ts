/**
 * The compiled service as the systemd unit runs it (deploy/systemd/slipway.service): `npm run build`'s
 * output under plain node, as the dedicated system user `slipway` (made as the unit's header says, when
 * missing), with no new privileges, no capabilities inherited or in its bounding set (the unit's
 * NoNewPrivileges=yes, CapabilityBoundingSet= and AmbientCapabilities=; the worker manifest's
 * allowPrivilegeEscalation: false and capabilities dropped; the image's non-root user). It deploys the
 * README's example app, which answers at its URL.
 *
 * Needs root to switch to that user: skipped otherwise (CI's root run covers it).
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { promisify } from 'node:util';
import * as tar from 'tar';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { compiledService } from '../support/compiled-build.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const USER = 'slipway';
const KEY = 'slw_compiled_user_test_key_0123456789abcdef';
const scratch: string[] = [];
let stopService: (() => Promise<void>) | null = null;

after(async () => {
  await stopService?.();
  for (const dir of scratch) await fs.rm(dir, { recursive: true, force: true });
});

/** A request to the app edge for the app's host name. */
function get(port: number, url: string): Promise<{ status: number; body: string }> {
  const { host } = new URL(url);
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', headers: { host } }, (response) => {
        let body = '';
        response.on('data', (chunk: Buffer) => (body += chunk.toString()));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

test(
  'the compiled service as the system user slipway, no new privileges and no capabilities, deploys the example app',
  { timeout: 10 * 60_000 },
  async (t) => {
    if (process.getuid?.() !== 0) return t.skip('needs root to run the service as the system user slipway');
    const setpriv = '/usr/bin/setpriv';
    if (!(await fs.stat(setpriv).catch(() => null))) return t.skip('setpriv (util-linux) is not installed');
    // The unit's header: a system user with no shell.
    if (
      await run('id', [USER]).then(
        () => false,
        () => true,
      )
    )
      await run('useradd', [
        '--system',
        '--home-dir',
        '/var/lib/slipway',
        '--no-create-home',
        '--shell',
        '/usr/sbin/nologin',
        USER,
      ]);
    const uid = Number((await run('id', ['-u', USER])).stdout.trim());
    const gid = Number((await run('id', ['-g', USER])).stdout.trim());

    // As /opt/slipway: the build owned by root, readable by all; the production modules beside it.
    // (The suite's one build, shared with test/ops/install.test.ts: support/compiled-build.ts.)
    const install = await compiledService(scratch);
    // As StateDirectory=slipway with StateDirectoryMode=0700: the user's own.
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-state-'));
    scratch.push(dataDir);
    await fs.chown(dataDir, uid, gid);
    await fs.chmod(dataDir, 0o700);

    const port = await freePort();
    const appsPort = await freePort();
    const child = spawn(
      setpriv,
      [
        `--reuid=${uid}`,
        `--regid=${gid}`,
        '--init-groups',
        '--no-new-privs',
        '--inh-caps=-all',
        '--bounding-set=-all',
        '--',
        process.execPath,
        path.join(install, 'dist', 'src', 'main.js'),
      ],
      {
        cwd: install,
        detached: true,
        env: {
          PATH: `${path.dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
          HOME: dataDir,
          NODE_ENV: 'production',
          SLIPWAY_DATA_DIR: dataDir,
          PORT: String(port),
          SLIPWAY_APPS_PORT: String(appsPort),
          SLIPWAY_BOOTSTRAP_API_KEY: KEY,
          LOG_LEVEL: 'info',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
    child.stderr.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    stopService = async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    };

    const base = `http://127.0.0.1:${port}`;
    const api = async (method: string, route: string, body?: unknown, type = 'application/json') => {
      const response = await fetch(`${base}${route}`, {
        method,
        headers: { 'x-api-key': KEY, ...(body === undefined ? {} : { 'content-type': type }) },
        body: body === undefined ? undefined : body instanceof Buffer ? body : JSON.stringify(body),
      });
      const parsed: any = await response.json().catch(() => null);
      return { status: response.status, body: parsed };
    };
    await eventually(
      'the service to be ready',
      async () => {
        if (child.exitCode !== null) throw new Error(`the service exited: ${output}`);
        return (await fetch(`${base}/readyz`).then(
          (r) => r.status,
          () => 0,
        )) === 200
          ? true
          : null;
      },
      { seconds: 300, describe: () => output },
    );
    // Its processes are the system user's, with no capabilities and no_new_privs.
    const status = await fs.readFile(`/proc/${child.pid}/status`, 'utf8');
    assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, 'm'));
    assert.match(status, /^CapEff:\s+0+$/m);
    assert.match(status, /^CapBnd:\s+0+$/m);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    // And it contains what it runs, as that user, when bubblewrap is installed.
    if (await fs.stat('/usr/bin/bwrap').catch(() => null))
      assert.match(output, /apps and builds run under bubblewrap/, output);

    const archive = path.join(await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-app-')), 'app.tar.gz');
    scratch.push(path.dirname(archive));
    await tar.c({ gzip: true, file: archive, cwd: path.join(ROOT, 'examples', 'agent-app'), portable: true }, ['.']);
    const upload = await api('POST', '/v2/uploads', await fs.readFile(archive), 'application/gzip');
    assert.equal(upload.status, 201, JSON.stringify(upload.body));
    const created = await api('POST', '/v2/deployments', {
      name: 'support-agent',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: upload.body.source_tarball_path,
        framework_config_path: 'slipway.json',
      },
      secrets: [{ name: 'GREETING', value: 'hello' }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const revision = await eventually(
      'the example to settle',
      async () => {
        const r = await api('GET', `/v2/deployments/${created.body.id}/revisions/${created.body.latest_revision_id}`);
        return /FAILED|DEPLOYED|UNKNOWN|INTERRUPTED/.test(r.body?.status ?? '') ? r.body : null;
      },
      { seconds: 300, describe: () => output },
    );
    assert.equal(revision.status, 'DEPLOYED', `${JSON.stringify(revision)}\n${output}`);
    const url = (await api('GET', `/v2/deployments/${created.body.id}`)).body.source_config.custom_url as string;
    const answer = await get(appsPort, url);
    assert.equal(answer.status, 200, answer.body);
    await stopService();
    stopService = null;
  },
);
