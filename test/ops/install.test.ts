/**
 * The install paths of docs/operations.md ("Install"): the compiled service starts and serves with
 * NODE_ENV=production and no TypeScript tooling; the Kubernetes base of deploy/service/ renders to
 * objects valid against the Kubernetes schemas, whose settings the service accepts; the systemd unit
 * of deploy/systemd/ is one systemd accepts, and its hardening leaves bubblewrap working.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../src/config.ts';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { labelProblems, schemaProblem } from '../listener-agent/k8s-schemas.ts';
import { cleanUp, makeDataDir, serviceEnv, withDeadline } from '../support/service-harness.ts';
import { compiledService } from '../support/compiled-build.ts';
import { eventually } from '../support/wait.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const scratch: string[] = [];

after(async () => {
  await cleanUp();
  for (const dir of scratch) await fs.rm(dir, { recursive: true, force: true });
});

async function exists(file: string): Promise<boolean> {
  return fs.stat(file).then(
    () => true,
    () => false,
  );
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile()).map((e) => path.relative(dir, path.join(e.parentPath, e.name)));
}

describe('the compiled service (npm run build)', { timeout: 600_000 }, () => {
  let out: string;

  test('builds to JavaScript with what it reads at run time beside it, and no TypeScript', async () => {
    // As in the image: the production dependencies in a node_modules above the build (the suite's one
    // build, shared with test/ops/compiled-service-user.test.ts: support/compiled-build.ts).
    out = path.join(await compiledService(scratch), 'dist');
    const files = await filesUnder(out);
    assert.ok(files.includes('src/main.js') && files.includes('src/cli/main.js'));
    assert.deepEqual(
      files.filter((f) => f.endsWith('.ts')),
      [],
      'no TypeScript to run',
    );
    for (const needed of [
      'migrations/001_core.sql',
      'runtime/langgraph-server.mjs',
      'web/dist/index.html',
      'package.json',
    ])
      assert.ok(files.includes(needed), `${needed} is in the build`);
    const main = await fs.readFile(path.join(out, 'src', 'main.js'), 'utf8');
    assert.doesNotMatch(main, /from ["'][^"']+\.ts["']/, 'imports name the .js files');
  });

  test('starts with NODE_ENV=production and plain node (no tsx), serves the API and the dashboard, stops on SIGTERM', async () => {
    const dataDir = await makeDataDir();
    const port = await freePort();
    const child = spawn(process.execPath, [path.join(out, 'src', 'main.js')], {
      cwd: os.tmpdir(),
      env: serviceEnv({
        NODE_ENV: 'production',
        SLIPWAY_DATA_DIR: dataDir,
        PORT: String(port),
        SLIPWAY_APPS_PORT: '0',
        SLIPWAY_BOOTSTRAP_API_KEY: 'slw_install_test_key_0123456789abcdef',
        LOG_LEVEL: 'warn',
        // Nothing to load TypeScript with: any .ts import would fail to start.
        NODE_OPTIONS: '',
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.resume();
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    try {
      const base = `http://127.0.0.1:${port}`;
      await eventually(
        'the compiled service to be ready',
        async () => {
          if (child.exitCode !== null) assert.fail(`the compiled service exited: ${stderr}`);
          const status = await fetch(`${base}/readyz`).then(
            (r) => r.status,
            () => 0,
          );
          return status === 200;
        },
        { everyMs: 200, describe: () => stderr },
      );
      const deployments = await fetch(`${base}/v2/deployments`, {
        headers: { 'x-api-key': 'slw_install_test_key_0123456789abcdef' },
      });
      assert.equal(deployments.status, 200);
      const dashboard = await fetch(`${base}/`, { headers: { accept: 'text/html' } });
      assert.equal(dashboard.status, 200);
      assert.match(await dashboard.text(), /<html/i);
    } finally {
      child.kill('SIGTERM');
    }
    assert.deepEqual(await withDeadline('exit', exited, 60_000), { code: 0, signal: null }, stderr);

    const version = await run(process.execPath, [path.join(out, 'src', 'cli', 'main.js'), '--version'], {
      cwd: os.tmpdir(),
    });
    const pkg = JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    assert.equal(version.stdout.trim(), pkg.version);
  });
});

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: any;
  data?: Record<string, string>;
}

describe('deploy/service/ (kustomize base of the service)', () => {
  const yaml = execFileSync('kubectl', ['kustomize', path.join(ROOT, 'deploy', 'service')], { encoding: 'utf8' });
  const objects = parseAllDocuments(yaml)
    .map((doc) => doc.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
  const one = (kind: string, name: string) => {
    const found = objects.find((o) => o.kind === kind && o.metadata.name.startsWith(name));
    assert.ok(found, `${kind} ${name}`);
    return found;
  };

  test('renders the API and worker Deployments, their Services, a PodDisruptionBudget, the config and the Secret, all valid', () => {
    assert.deepEqual(objects.map((o) => `${o.kind}/${o.metadata.name.replace(/-[a-z0-9]{10}$/, '')}`).sort(), [
      'ConfigMap/slipway-config',
      'Deployment/slipway-api',
      'Deployment/slipway-worker',
      'Namespace/slipway',
      'PodDisruptionBudget/slipway-api',
      'Secret/slipway-secrets',
      'Service/slipway-api',
      'Service/slipway-apps',
    ]);
    for (const o of objects) {
      const problem =
        o.kind === 'PodDisruptionBudget'
          ? (() => {
              try {
                new PodDisruptionBudget(structuredClone(o)).validate();
                return null;
              } catch (error) {
                return String(error);
              }
            })()
          : // kustomize wraps long base64 values over lines, which the API server's decoder skips.
            schemaProblem(
              o.kind === 'Secret'
                ? {
                    ...o,
                    data: Object.fromEntries(Object.entries(o.data ?? {}).map(([k, v]) => [k, v.replace(/\s+/g, '')])),
                  }
                : o,
            );
      assert.equal(problem, null, `${o.kind} ${o.metadata.name}`);
      assert.deepEqual(labelProblems(o.metadata.labels, `${o.kind} ${o.metadata.name}`), []);
      if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, 'slipway');
    }
  });

  test('API replicas and the worker, probed on /healthz and /readyz; the budget keeps an API pod; the Services reach them', () => {
    const api = one('Deployment', 'slipway-api');
    const worker = one('Deployment', 'slipway-worker');
    assert.ok(api.spec.replicas >= 2, 'several API replicas');
    assert.equal(
      api.spec.strategy.rollingUpdate.maxUnavailable,
      0,
      'a rollout never lowers the API below its replicas',
    );
    for (const deployment of [api, worker]) {
      const [container] = deployment.spec.template.spec.containers;
      assert.equal(container.livenessProbe.httpGet.path, '/healthz');
      assert.equal(container.readinessProbe.httpGet.path, '/readyz');
      assert.equal(container.securityContext.allowPrivilegeEscalation, false);
      assert.equal(container.securityContext.privileged, undefined, 'never privileged');
      assert.equal(deployment.spec.template.spec.securityContext.runAsNonRoot, true);
    }
    const roles = (d: K8sObject) =>
      d.spec.template.spec.containers[0].env.find((e: any) => e.name === 'SLIPWAY_ROLES').value;
    assert.deepEqual([roles(api), roles(worker)], ['api', 'worker']);
    const budget = one('PodDisruptionBudget', 'slipway-api');
    assert.equal(budget.spec.minAvailable, 1);
    const apiLabels = api.spec.template.metadata.labels;
    for (const [key, value] of Object.entries(budget.spec.selector.matchLabels)) assert.equal(apiLabels[key], value);
    for (const [service, deployment] of [
      ['slipway-api', api],
      ['slipway-apps', worker],
    ] as const) {
      const selector = one('Service', service).spec.selector as Record<string, string>;
      for (const [key, value] of Object.entries(selector))
        assert.equal(
          deployment.spec.template.metadata.labels[key],
          value,
          `${service} selects ${deployment.metadata.name}`,
        );
    }
    // Both read the generated ConfigMap and Secret by their rendered (suffixed) names.
    const config = one('ConfigMap', 'slipway-config');
    const secret = one('Secret', 'slipway-secrets');
    for (const deployment of [api, worker]) {
      const from = deployment.spec.template.spec.containers[0].envFrom;
      assert.deepEqual(from, [
        { configMapRef: { name: config.metadata.name } },
        { secretRef: { name: secret.metadata.name } },
      ]);
    }
  });

  test('the settings load as the service reads them, once the Secret holds a real key; the placeholder is refused', () => {
    const config = one('ConfigMap', 'slipway-config');
    const secret = one('Secret', 'slipway-secrets');
    const decoded = Object.fromEntries(
      Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]),
    );
    assert.deepEqual(Object.keys(decoded).sort(), ['DATABASE_URL', 'SLIPWAY_ENCRYPTION_KEY']);
    for (const deployment of ['slipway-api', 'slipway-worker']) {
      const container = one('Deployment', deployment).spec.template.spec.containers[0];
      const env: Record<string, string> = {
        ...config.data,
        ...decoded,
        ...Object.fromEntries(container.env.map((e: any) => [e.name, e.value])),
      };
      assert.throws(() => loadConfig(env), /SLIPWAY_ENCRYPTION_KEY: must be 32 bytes/);
      const loaded = loadConfig({ ...env, SLIPWAY_ENCRYPTION_KEY: 'ab'.repeat(32) });
      assert.equal(loaded.databaseUrl, decoded.DATABASE_URL);
      assert.equal(loaded.host, '0.0.0.0');
      assert.equal(loaded.port, 8124);
      assert.equal(loaded.publicUrl, 'https://slipway.example.com');
    }
  });
});

describe('deploy/systemd/slipway.service', () => {
  const unitFile = path.join(ROOT, 'deploy', 'systemd', 'slipway.service');

  test('systemd accepts the unit (systemd-analyze verify)', async (t) => {
    if (!(await exists('/usr/bin/systemd-analyze'))) return t.skip('systemd-analyze is not installed here');
    // It checks that ExecStart's program exists: node, at the path the unit names.
    const unit = await fs.readFile(unitFile, 'utf8');
    const node = /^ExecStart=(\S+)/m.exec(unit)?.[1];
    if (!node || !(await exists(node))) return t.skip(`${node} is not this machine's node`);
    const { stderr } = await run('systemd-analyze', ['verify', unitFile]).catch((error: { stderr: string }) => ({
      stderr: `failed: ${error.stderr}`,
    }));
    // DelegateSubgroup= needs systemd 254; an older one ignores it with this warning (documented in the unit).
    const problems = stderr
      .split('\n')
      .filter((line) => line.trim() !== '' && !/Unknown key 'DelegateSubgroup'/.test(line));
    assert.deepEqual(problems, []);
  });

  test('hardened, restarted on failure, with a file limit, running the compiled service', async () => {
    const unit = await fs.readFile(unitFile, 'utf8');
    const settings = new Map(
      unit
        .split('\n')
        .filter((line) => /^[A-Za-z]+=/.test(line))
        .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
    );
    assert.equal(settings.get('ExecStart'), '/usr/bin/node /opt/slipway/dist/src/main.js');
    assert.equal(settings.get('Restart'), 'on-failure');
    assert.equal(settings.get('KillMode'), 'mixed', 'SIGTERM to the service alone: it stops its apps and database');
    assert.equal(settings.get('NoNewPrivileges'), 'yes');
    assert.equal(settings.get('ProtectSystem'), 'strict');
    assert.equal(settings.get('CapabilityBoundingSet'), '');
    assert.ok(Number(settings.get('LimitNOFILE')) >= 65536);
    assert.match(unit, /^Environment=NODE_ENV=production$/m);
    for (const ruledOut of ['RestrictNamespaces', 'PrivateDevices', 'ProtectControlGroups', 'MemoryDenyWriteExecute'])
      assert.equal(settings.has(ruledOut), false, `${ruledOut} would break the data plane (see the unit's comment)`);
  });

  test("bubblewrap still contains apps under the unit's NoNewPrivileges and empty capability bounding set", async (t) => {
    if (!(await exists('/usr/bin/bwrap')) || !(await exists('/usr/bin/setpriv')))
      return t.skip('bubblewrap or setpriv is not installed here');
    const asNobody = process.getuid?.() === 0 ? ['--reuid=65534', '--regid=65534', '--clear-groups'] : [];
    const { stdout } = await run('/usr/bin/setpriv', [
      '--no-new-privs',
      ...asNobody,
      '--inh-caps=-all',
      '--bounding-set=-all',
      '/usr/bin/bwrap',
      '--unshare-user',
      '--unshare-pid',
      '--unshare-net',
      '--unshare-ipc',
      '--unshare-uts',
      '--ro-bind',
      '/',
      '/',
      '--dev',
      '/dev',
      '--proc',
      '/proc',
      '/bin/sh',
      '-c',
      'echo contained $$',
    ]);
    // bubblewrap's own init is PID 1 of the new namespace, the command its first child.
    assert.match(stdout.trim(), /^contained [12]$/, 'in a PID namespace of its own');
  });
});
