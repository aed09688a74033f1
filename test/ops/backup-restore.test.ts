/**
 * `slipway backup` and `slipway restore` as an operator runs them (docs/operations.md, "Back up and
 * restore"): the real service on an embedded PostgreSQL with deployments, secrets, a listener, an OAuth
 * token and a code-host integration; a backup taken while it runs; then the archive refused when it
 * should be (another key, a target that is not empty, a truncated, changed or path-escaping archive),
 * with nothing changed; and restored on a fresh data directory, where everything reads back through
 * the API, the secrets open, and the app is built again and answers on the local data plane.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as tar from 'tar';
import { keyIdOf } from '../../src/crypto/secret-box.ts';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { findPgTools } from '../../src/ops/app-database-dump.ts';
import { signManifest, type Manifest } from '../../src/ops/backup-archive.ts';
import { cliUser, type CliResult, type CliUser } from '../cli/cli-runner.ts';
import { authorizeInBrowser, startOidcServer, type OidcServer } from '../fakes/oidc-server.ts';
import { makeRepositories, startFakeGitHub, type FakeGitHub } from '../fakes/github-server.ts';
import { call, cleanUp, makeDataDir, startService, stop, type Service } from '../support/service-harness.ts';
import { eventually } from '../support/wait.ts';

const KEY = 'slw_backup_test_bootstrap_key_0123456789';
const GITHUB_TOKEN = 'ghp_backuptoken0123456789abcdefghijklmn';
const EXAMPLE = path.resolve(import.meta.dirname, '../../examples/agent-app');

let idp: OidcServer;
let github: FakeGitHub;
let cli: CliUser;
let port: number;
let appsPort: number;
let sourceDir: string;
let encryptionKey: Buffer;
let archive: string;
const scratch: string[] = [];

/** The same environment for the service before and after the restore: same ports, so the same URLs. */
function serviceEnv(): Record<string, string> {
  return {
    PORT: String(port),
    SLIPWAY_APPS_PORT: String(appsPort),
    SLIPWAY_BOOTSTRAP_API_KEY: KEY,
    SLIPWAY_ALLOW_INSECURE_OAUTH: '1',
    SLIPWAY_ALLOW_INSECURE_CODEHOST: '1',
    SLIPWAY_CODEHOST_ALLOWED_URLS: github.url,
    SLIPWAY_HEALTH_TIMEOUT_SECONDS: '60',
    SLIPWAY_DRAIN_SECONDS: '2',
  };
}

async function emptyDir(): Promise<string> {
  const dir = await makeDataDir();
  // The sandboxed app's user passes through (never lists) the data directory.
  await fs.chmod(dir, 0o711);
  return dir;
}

async function scratchFile(name: string): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-backup-test-'));
  scratch.push(dir);
  return path.join(dir, name);
}

/** `slipway <args>` with the service's configuration for `dataDir`. */
function slipway(args: string[], dataDir: string, env: Record<string, string> = {}): Promise<CliResult> {
  return cli.run(args, { env: { SLIPWAY_DATA_DIR: dataDir, ...env } });
}

/** Packs an app folder and uploads it; its source_tarball_path. */
async function uploadTarball(base: string, key: string, folder: string): Promise<string> {
  const file = await scratchFile('app.tar.gz');
  await tar.c({ gzip: true, file, cwd: folder, portable: true }, await fs.readdir(folder));
  const response = await fetch(`${base}/v2/uploads`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/gzip' },
    body: await fs.readFile(file),
  });
  const body = (await response.json()) as { source_tarball_path: string };
  assert.equal(response.status, 201, JSON.stringify(body));
  return body.source_tarball_path;
}

async function listing(dir: string): Promise<string[]> {
  return (await fs.readdir(dir)).sort();
}

function requestApp(url: string, pathname: string): Promise<{ status: number; body: string }> {
  const { host } = new URL(url);
  return new Promise((resolve, reject) => {
    const request = http.request({ host: '127.0.0.1', port: appsPort, path: pathname, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    request.on('error', reject);
    request.end();
  });
}

/** Unpacks an archive to a folder, to make a changed copy of it. */
async function unpack(file: string): Promise<{ dir: string; manifest: Manifest }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-backup-unpacked-'));
  scratch.push(dir);
  await tar.x({ file, cwd: dir });
  return { dir, manifest: JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8')) as Manifest };
}

/** Packs entries (manifest first) as the backup does, signing the manifest with `key` when given. */
async function repack(dir: string, manifest: Manifest, names: string[], key: Buffer | null): Promise<string> {
  const bytes = Buffer.from(JSON.stringify(manifest, null, 2) + '\n');
  await fs.writeFile(path.join(dir, 'manifest.json'), bytes);
  if (key) await fs.writeFile(path.join(dir, 'manifest.hmac'), signManifest(bytes, key) + '\n');
  const out = await scratchFile('changed.tar.gz');
  await tar.c({ gzip: true, file: out, cwd: dir, portable: true, noDirRecurse: true }, [
    'manifest.json',
    'manifest.hmac',
    ...names,
  ]);
  return out;
}

before(async () => {
  [port, appsPort] = [await freePort(), await freePort()];
  idp = await startOidcServer({ redirectUris: [`http://127.0.0.1:${port}/v2/auth/callback/acme-idp`] });
  github = await startFakeGitHub({ repositories: makeRepositories(3), tokens: { [GITHUB_TOKEN]: 'all' } });
  cli = await cliUser();
});

after(async () => {
  await cleanUp();
  await idp?.close();
  await github?.close();
  await cli?.remove();
  for (const dir of scratch) await fs.rm(dir, { recursive: true, force: true });
});

describe('backup and restore', { timeout: 10 * 60_000 }, () => {
  let service: Service;
  const made: {
    listenerId?: string;
    containerId?: string;
    appId?: string;
    appUrl?: string;
    integrationId?: string;
    tokenId?: string;
    connectionId?: string;
    deployments?: unknown;
  } = {};

  test('a running service with deployments, secrets, a listener, an OAuth token and a code host', async () => {
    sourceDir = await emptyDir();
    service = await startService(sourceDir, serviceEnv());
    encryptionKey = Buffer.from((await fs.readFile(path.join(sourceDir, 'encryption.key'), 'utf8')).trim(), 'hex');

    const listener = await call(service, 'POST', '/v2/listeners', KEY, {
      compute_type: 'k8s',
      compute_id: 'eu-west',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    assert.equal(listener.status, 201, JSON.stringify(listener.body));
    made.listenerId = listener.body.id;
    const container = await call(service, 'POST', '/v2/deployments', KEY, {
      name: 'on-cluster',
      source: 'external_container',
      source_config: { listener_id: made.listenerId },
      source_revision_config: { image_uri: 'registry.example.com/agent:1' },
      secrets: [{ name: 'API_TOKEN', value: 'cluster-secret-value' }],
    });
    assert.equal(container.status, 201, JSON.stringify(container.body));
    made.containerId = container.body.id;

    const tarball = await uploadTarball(service.base, KEY, EXAMPLE);
    const app = await call(service, 'POST', '/v2/deployments', KEY, {
      name: 'support-agent',
      source: 'internal_source',
      source_config: {},
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
      secrets: [{ name: 'GREETING', value: 'hello-from-before-the-backup' }],
    });
    assert.equal(app.status, 201, JSON.stringify(app.body));
    made.appId = app.body.id;
    const deployed = await eventually(
      'the app deployed',
      async () => {
        const d = await call(service, 'GET', `/v2/deployments/${made.appId}`, KEY);
        if (d.body.status === 'READY' && d.body.active_revision_id) return d.body;
        const revision = await call(
          service,
          'GET',
          `/v2/deployments/${made.appId}/revisions/${app.body.latest_revision_id}`,
          KEY,
        );
        assert.ok(!['BUILD_FAILED', 'DEPLOY_FAILED'].includes(revision.body.status), JSON.stringify(revision.body));
        return null;
      },
      { seconds: 180, everyMs: 300, retryErrors: true },
    );
    made.appUrl = deployed.source_config.custom_url;
    const home = await requestApp(made.appUrl!, '/');
    assert.equal(JSON.parse(home.body).greeting, 'hello-from-before-the-backup');

    const integration = await call(service, 'POST', '/v1/integrations/forge/codehost', KEY, {
      name: 'octo',
      api_url: github.url,
      token: GITHUB_TOKEN,
    });
    assert.equal(integration.status, 201, JSON.stringify(integration.body));
    made.integrationId = integration.body.id;

    // Providers belong to the organization: its admin key (the first start's, handed over in a file).
    const orgKey = (await fs.readFile(path.join(sourceDir, 'first-admin-key'), 'utf8')).trim();
    const provider = await call(service, 'POST', '/v2/auth/providers', orgKey, {
      provider_id: 'acme-idp',
      name: 'Acme',
      ...idp.providerConfig('confidential'),
    });
    assert.equal(provider.status, 201, JSON.stringify(provider.body));
    const pending = await call(service, 'POST', '/v2/auth/authenticate', KEY, { provider_id: 'acme-idp' });
    assert.equal(pending.body.status, 'pending', JSON.stringify(pending.body));
    const callback = new URL(await authorizeInBrowser(pending.body.url, { login: 'alice' }));
    assert.equal((await fetch(`${service.base}${callback.pathname}${callback.search}`)).status, 200);
    const waited = await call(service, 'GET', `/v2/auth/wait/${pending.body.auth_id}?timeout=5`, KEY);
    assert.equal(waited.body.status, 'completed', JSON.stringify(waited.body));
    made.tokenId = waited.body.token_id;
    const connection = await call(service, 'POST', '/v2/auth/agents/support-bot/connections', KEY, {
      oauth_token_id: made.tokenId,
    });
    assert.equal(connection.status, 201, JSON.stringify(connection.body));
    made.connectionId = connection.body.id;
    made.deployments = (await call(service, 'GET', '/v2/deployments?limit=100', KEY)).body.resources;
  });

  test('backup while the service runs: one archive, without the key', async () => {
    archive = await scratchFile('slipway.tar.gz');
    const tools = await findPgTools();
    // The embedded server is PostgreSQL 17: its apps' databases need a pg_dump of 17 or newer.
    const dumpable = tools !== null && tools.major >= 17;
    if (!dumpable) {
      const refused = await slipway(['backup', archive], sourceDir);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, /app database\(s\) need pg_dump 17 or newer.*--without-app-data/s);
      await assert.rejects(fs.stat(archive), 'nothing written');
    }
    const result = await slipway(['backup', archive, ...(dumpable ? [] : ['--without-app-data'])], sourceDir);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /database: \d+ tables, \d+ rows/);
    assert.equal((await fs.stat(archive)).mode & 0o777, 0o600, 'only its owner reads the archive');
    const { manifest } = await unpack(archive);
    assert.equal(manifest.keyCheck.keyId, keyIdOf(encryptionKey));
    assert.equal(manifest.appDatabases.length, 1);
    const everything = await fs.readFile(archive);
    assert.ok(!everything.includes(encryptionKey.toString('hex')), 'the key is not in the archive');
    // A process with another key is refused as the service would be: it could not vouch for the archive.
    const other = randomBytes(32);
    const wrongKey = await slipway(['backup', `${archive}.other`, '--without-app-data'], sourceDir, {
      SLIPWAY_ENCRYPTION_KEY: other.toString('hex'),
    });
    assert.equal(wrongKey.code, 2, wrongKey.stderr);
    assert.match(wrongKey.stderr, /is not the key this database's secrets are sealed with/);
    await assert.rejects(fs.stat(`${archive}.other`));
    const again = await slipway(['backup', archive, '--without-app-data'], sourceDir);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /exists: name a new file/);
  });

  test('restore with another key: refused, naming both key ids, and nothing changed', async () => {
    const target = await emptyDir();
    const other = randomBytes(32);
    await fs.writeFile(path.join(target, 'encryption.key'), other.toString('hex') + '\n', { mode: 0o600 });
    const refused = await slipway(['restore', archive], target);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(
        `id ${keyIdOf(other)}.*not the key this backup's secrets are sealed with \\(id ${keyIdOf(encryptionKey)}\\)`,
      ),
    );
    assert.deepEqual(await listing(target), ['encryption.key']);
    const noKey = await slipway(['restore', archive], await emptyDir());
    assert.equal(noKey.code, 2);
    assert.match(noKey.stderr, /a restore needs the encryption key of the backup/);
  });

  test('restore into a data directory that is not empty: refused, nothing changed', async () => {
    const refused = await slipway(['restore', archive], sourceDir);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /is not empty \(it holds .*postgres/);
    const target = await emptyDir();
    await fs.copyFile(path.join(sourceDir, 'encryption.key'), path.join(target, 'encryption.key'));
    await fs.writeFile(path.join(target, 'notes.txt'), 'mine');
    const stray = await slipway(['restore', archive], target);
    assert.equal(stray.code, 2);
    assert.deepEqual(await listing(target), ['encryption.key', 'notes.txt']);
    assert.equal((await call(service, 'GET', '/v2/deployments?limit=100', KEY)).body.resources.length, 2);
  });

  test('a truncated, a changed or a path-escaping archive: refused whole, nothing written', async () => {
    const target = await emptyDir();
    await fs.copyFile(path.join(sourceDir, 'encryption.key'), path.join(target, 'encryption.key'));
    const bytes = await fs.readFile(archive);
    const expectRefused = async (file: string, pattern: RegExp) => {
      const result = await slipway(['restore', file], target);
      assert.equal(result.code, 2, `${file}: ${result.stderr}\n${result.stdout}`);
      assert.match(result.stderr, pattern);
      assert.deepEqual(await listing(target), ['encryption.key']);
    };

    const truncated = await scratchFile('truncated.tar.gz');
    await fs.writeFile(truncated, bytes.subarray(0, Math.floor(bytes.length * 0.6)));
    await expectRefused(truncated, /truncated/);
    const garbage = await scratchFile('garbage.tar.gz');
    await fs.writeFile(garbage, randomBytes(4096));
    await expectRefused(garbage, /not gzip-compressed|truncated|not a Slipway backup/);

    // Someone without the key adds an admin key and fixes up the manifest's hashes: the signature fails.
    const { dir, manifest } = await unpack(archive);
    const names = manifest.entries.map((e) => e.name);
    const keysEntry = manifest.entries.find((e) => e.subject === 'api_keys')!;
    const keysFile = path.join(dir, keysEntry.name);
    const rows = (await fs.readFile(keysFile, 'utf8')).trim().split('\n');
    const forged = { ...JSON.parse(rows[0]!), id: '00000000-0000-4000-8000-000000000001', prefix: 'forged' };
    await fs.writeFile(keysFile, [...rows, JSON.stringify(forged)].join('\n') + '\n');
    const changed = await fs.readFile(keysFile);
    const rehashed: Manifest = {
      ...manifest,
      entries: manifest.entries.map((e) =>
        e === keysEntry
          ? {
              ...e,
              bytes: changed.length,
              rows: rows.length + 1,
              sha256: createHash('sha256').update(changed).digest('hex'),
            }
          : e,
      ),
    };
    await expectRefused(await repack(dir, rehashed, names, null), /manifest was changed after the backup was written/);
    // The manifest as it was: the entry's size differs; the same size with a byte changed: its SHA-256.
    await expectRefused(
      await repack(dir, manifest, names, encryptionKey),
      /"database\/api_keys\.jsonl" \(\d+ bytes\) is not the one its manifest lists/,
    );
    const original = rows.join('\n') + '\n';
    await fs.writeFile(keysFile, original.replace('"admin"', '"Admin"'));
    await expectRefused(
      await repack(dir, manifest, names, encryptionKey),
      /api_keys\.jsonl is not what the backup wrote/,
    );
    await fs.writeFile(keysFile, original);

    // Signed with the right key (an insider's archive), still: a file entry naming a path out of the
    // data directory, an entry the manifest does not list, a link.
    const escape = '../../../../tmp/slipway-escaped';
    await fs.mkdir(path.join(dir, 'files', 'uploads'), { recursive: true });
    await fs.writeFile(path.join(dir, 'files', 'uploads', 'x'), 'escaped');
    const escaping: Manifest = {
      ...manifest,
      entries: [
        ...manifest.entries,
        {
          name: `files/uploads/${escape}`,
          kind: 'file',
          subject: `uploads/${escape}`,
          bytes: 7,
          sha256: 'a'.repeat(64),
        },
      ],
    };
    await expectRefused(
      await repack(dir, escaping, names, encryptionKey),
      /lists an entry of a name a backup never has/,
    );
    await fs.writeFile(path.join(dir, 'evil'), 'escaped');
    await expectRefused(
      await repack(dir, manifest, [...names, 'evil'], encryptionKey),
      /an entry its manifest does not list/,
    );
    await fs.symlink('/etc/passwd', path.join(dir, 'files', 'uploads', 'link'));
    await expectRefused(
      await repack(dir, manifest, [...names, 'files/uploads/link'], encryptionKey),
      /holds a SymbolicLink entry/,
    );
    await assert.rejects(fs.stat('/tmp/slipway-escaped'), 'nothing outside the data directory');
  });

  test('restore on a fresh data directory: everything reads back, secrets open, the app is built again and answers', async () => {
    assert.deepEqual(await stop(service), { code: 0, signal: null });
    // Taken again with the service stopped: the command starts the embedded server itself, then stops it.
    const stoppedArchive = await scratchFile('stopped.tar.gz');
    const backup = await slipway(['backup', stoppedArchive, '--without-app-data'], sourceDir);
    assert.equal(backup.code, 0, backup.stderr);
    assert.deepEqual(
      (await fs.readdir(sourceDir)).filter((f) => f === 'slipway.lock'),
      [],
      'the data directory is free again',
    );
    const target = await emptyDir();
    await fs.copyFile(path.join(sourceDir, 'encryption.key'), path.join(target, 'encryption.key'));
    const restored = await slipway(['restore', stoppedArchive], target);
    assert.equal(restored.code, 0, `${restored.stderr}\n${restored.stdout}`);
    assert.match(restored.stdout, /restored/);

    const after = await startService(target, serviceEnv());
    assert.deepEqual((await call(after, 'GET', '/v2/deployments?limit=100', KEY)).body.resources, made.deployments);
    const listener = await call(after, 'GET', `/v2/listeners/${made.listenerId}`, KEY);
    assert.equal(listener.body.compute_id, 'eu-west');
    const container = await call(after, 'GET', `/v2/deployments/${made.containerId}`, KEY);
    assert.deepEqual(container.body.secrets, [{ name: 'API_TOKEN', value: '********' }]);

    // The code host's token opens: the repositories are listed with it.
    const repos = await call(after, 'GET', `/v1/integrations/forge/codehost/${made.integrationId}/repos`, KEY);
    assert.equal(repos.status, 200, JSON.stringify(repos.body));
    assert.equal(repos.body.length, 3);
    // The OAuth token opens: an agent of a deployment gets its access token.
    const credential = await call(after, 'POST', `/v2/deployments/${made.containerId}/agent-credentials`, KEY, {
      agent_ids: ['support-bot'],
    });
    assert.equal(credential.status, 201, JSON.stringify(credential.body));
    const token = await fetch(`${after.base}/v2/auth/agents/support-bot/connections/${made.connectionId}/token`, {
      method: 'POST',
      headers: { authorization: `Bearer ${credential.body.credential}` },
    });
    const tokenBody = (await token.json()) as { access_token?: string };
    assert.equal(token.status, 200, JSON.stringify(tokenBody));
    assert.ok(tokenBody.access_token && tokenBody.access_token.length > 10);

    // The app: built again from its upload (kept in the database) and serving its secret.
    const answer = await eventually(
      'the restored app answers',
      async () => {
        const home = await requestApp(made.appUrl!, '/');
        return home.status === 200 ? JSON.parse(home.body) : null;
      },
      { seconds: 180, everyMs: 300, retryErrors: true },
    );
    assert.equal(answer.greeting, 'hello-from-before-the-backup');
    // A redeploy (a new revision) goes through as well.
    const current = await call(after, 'GET', `/v2/deployments/${made.appId}`, KEY);
    const patched = await call(after, 'PATCH', `/v2/deployments/${made.appId}`, KEY, {
      source_revision_config: current.body.source_revision_config,
      secrets: [{ name: 'GREETING', value: 'hello-after-the-restore' }],
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    await eventually(
      'the redeployed app answers',
      async () => {
        const home = await requestApp(made.appUrl!, '/');
        return home.status === 200 && JSON.parse(home.body).greeting === 'hello-after-the-restore';
      },
      { seconds: 180, everyMs: 300, retryErrors: true },
    );
    assert.deepEqual(await stop(after), { code: 0, signal: null });
  });
});
