/**
 * Makes test/fixtures/upgrade-from-<commit>.sql, the database of an earlier Slipway for the upgrade test
 * (test/ops/upgrade.test.ts): that version's own code, run from `git archive <commit>`, makes the data
 * through its API on a scratch server; the fixture is its migrations (its schema, as it made it) and
 * its rows. Run once per release worth testing an upgrade from, and commit the result:
 *
 *   node --import tsx scripts/make-upgrade-fixture.ts <commit>
 *
 * The old service runs with the api role only (no builds), on this checkout's node_modules.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import pino from 'pino';
import * as tar from 'tar';
import { databaseUrl, withClient } from '../src/db/admin-client.ts';
import { freePort } from '../src/db/embedded-postgres.ts';
import { serviceTables } from '../src/ops/table-data.ts';
import { FIXTURE_API_KEY, FIXTURE_ENCRYPTION_KEY } from '../test/fixtures/upgrade-fixture-keys.ts';
import { startScratchServer } from './scratch-server.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

async function gitArchive(commit: string, into: string): Promise<void> {
  const git = spawn('git', ['archive', '--format=tar', commit], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const extract = tar.x({ cwd: into });
  git.stdout.pipe(extract);
  const [code] = await Promise.all([
    new Promise<number | null>((resolve) => git.on('close', resolve)),
    new Promise((resolve, reject) => extract.on('finish', resolve).on('error', reject)),
  ]);
  if (code !== 0) throw new Error(`git archive ${commit} failed (${code})`);
}

async function waitReady(base: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${base}/readyz`)).status === 200) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error('the old service did not become ready');
}

/** What the old API answered: an object with an id, for what this script does with it. */
interface Created {
  id: string;
}

async function api(base: string, key: string, method: string, url: string, body?: unknown): Promise<Created> {
  const response = await fetch(`${base}${url}`, {
    method,
    headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  if (response.status >= 300) throw new Error(`${method} ${url}: ${response.status} ${text}`);
  return (text === '' ? { id: '' } : JSON.parse(text)) as Created;
}

/** What a user of that version had made: deployments with secrets and revisions, a listener, keys, a provider. */
async function makeData(base: string, dataDir: string): Promise<void> {
  const key = FIXTURE_API_KEY;
  const orgKey = (await fs.readFile(path.join(dataDir, 'first-admin-key'), 'utf8')).trim();
  const listener = await api(base, key, 'POST', '/v2/listeners', {
    compute_type: 'k8s',
    compute_id: 'prod-cluster',
    compute_config: { k8s_namespaces: ['agents', 'staging'] },
  });
  await api(base, key, 'POST', '/v2/deployments', {
    name: 'cluster-agent',
    source: 'external_container',
    source_config: { listener_id: listener.id, listener_config: { k8s_namespace: 'agents' } },
    source_revision_config: { image_uri: 'registry.example.com/cluster-agent:1.0.0' },
    secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-fixture-cluster-secret' }],
    secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
  });
  const local = await api(base, key, 'POST', '/v2/deployments', {
    name: 'local-agent',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/local-agent:1' },
    secrets: [{ name: 'GREETING', value: 'hello-from-the-old-version' }],
  });
  await api(base, key, 'PATCH', `/v2/deployments/${local.id}`, {
    source_revision_config: { image_uri: 'registry.example.com/local-agent:2' },
  });
  const tagKey = await api(base, key, 'POST', '/v2/tags/keys', { key: 'team' });
  const tagValue = await api(base, key, 'POST', `/v2/tags/keys/${tagKey.id}/values`, { value: 'support' });
  await api(base, key, 'PUT', `/v2/deployments/${local.id}/tags`, { tag_value_ids: [tagValue.id] });
  await api(base, orgKey, 'POST', '/v2/api-keys', { name: 'ci', role: 'member' });
  await api(base, orgKey, 'POST', '/v2/auth/providers', {
    provider_id: 'acme-idp',
    name: 'Acme',
    issuer: 'https://idp.example.com',
    auth_url: 'https://idp.example.com/authorize',
    token_url: 'https://idp.example.com/token',
    client_id: 'slipway',
    client_secret: 'client-secret-of-the-old-version',
    scopes: ['openid', 'email'],
  });
}

/** Tables in an order where each row's references are loaded before it (cycles only through deferrable keys). */
async function loadOrder(client: pg.Client): Promise<string[]> {
  const tables = await serviceTables(client);
  const edges = await client.query<{ child: string; parent: string }>(
    `select c.conrelid::regclass::text as child, c.confrelid::regclass::text as parent from pg_constraint c
      where c.contype = 'f' and not c.condeferrable and c.conrelid <> c.confrelid`,
  );
  const order: string[] = [];
  const visiting = new Set<string>();
  const visit = (table: string) => {
    if (order.includes(table)) return;
    if (visiting.has(table)) return; // A cycle: its nullable side is null in this data, or the load fails loudly.
    visiting.add(table);
    for (const edge of edges.rows) if (edge.child === table) visit(edge.parent);
    order.push(table);
  };
  for (const table of tables) visit(table);
  return order;
}

async function fixtureSql(url: string, commit: string, migrationsDir: string): Promise<string> {
  const lines = [
    `-- The database of Slipway at commit ${commit}, made by that version's own code through its API`,
    `-- (scripts/make-upgrade-fixture.ts), for test/ops/upgrade.test.ts. Generated: do not edit.`,
    `-- Its schema is its migrations; its rows follow. Encryption key and API key: see the script.`,
    'begin;',
    'create table slipway_migrations (id integer primary key, name text not null, applied_at timestamptz not null default now());',
  ];
  for (const file of (await fs.readdir(migrationsDir)).filter((f) => f.endsWith('.sql')).sort()) {
    const [, id, name] = /^(\d+)_([\w-]+)\.sql$/.exec(file)!;
    lines.push(`-- ${file}`, (await fs.readFile(path.join(migrationsDir, file), 'utf8')).trim());
    lines.push(`insert into slipway_migrations (id, name) values (${Number(id)}, '${name}');`);
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const table of await loadOrder(client)) {
      const columns = await client.query<{ name: string }>(
        `select attname as name from pg_attribute where attrelid = $1::regclass and attnum > 0
          and not attisdropped and attgenerated = '' order by attnum`,
        [table],
      );
      const list = columns.rows.map((c) => client.escapeIdentifier(c.name)).join(', ');
      const rows = await client.query<{ r: string }>(`select row_to_json(t)::text as r from ${table} t order by 1`);
      if (rows.rows.length === 0) continue;
      const json = `[${rows.rows.map((r) => r.r).join(',\n')}]`;
      if (json.includes('$rows$')) throw new Error(`${table}: a row holds the quoting marker`);
      lines.push(
        `-- ${table}: ${rows.rows.length} rows`,
        `insert into ${table} (${list}) overriding system value select ${list} from json_populate_recordset(null::${table}, $rows$${json}$rows$);`,
      );
    }
    const sequences = await client.query<{ table: string; column: string }>(
      `select c.relname as table, a.attname as column from pg_class c join pg_namespace n on n.oid = c.relnamespace
         join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
        where n.nspname = current_schema() and c.relkind = 'r'
          and pg_get_serial_sequence(quote_ident(c.relname), a.attname) is not null order by 1`,
    );
    for (const { table, column } of sequences.rows)
      lines.push(
        `select setval(pg_get_serial_sequence('${table}', '${column}'), coalesce((select max(${column}) from ${table}), 0) + 1, false);`,
      );
  } finally {
    await client.end();
  }
  lines.push('commit;', '');
  return lines.join('\n');
}

async function main(): Promise<void> {
  const commit = process.argv[2];
  if (!commit) throw new Error('usage: node --import tsx scripts/make-upgrade-fixture.ts <commit>');
  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-fixture-'));
  await fs.chmod(work, 0o711);
  const source = path.join(work, 'source');
  await fs.mkdir(source);
  const server = await startScratchServer(undefined, pino({ level: 'warn' }), 'slipway-fixture');
  try {
    await gitArchive(commit, source);
    await fs.symlink(path.join(ROOT, 'node_modules'), path.join(source, 'node_modules'));
    await withClient(server.adminUrl, (c) => c.query('create database fixture'));
    const url = databaseUrl(server.adminUrl, 'fixture');
    const port = await freePort();
    const dataDir = path.join(work, 'data');
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: source,
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: url,
        SLIPWAY_ENCRYPTION_KEY: FIXTURE_ENCRYPTION_KEY,
        SLIPWAY_BOOTSTRAP_API_KEY: FIXTURE_API_KEY,
        SLIPWAY_ROLES: 'api',
        SLIPWAY_DATA_DIR: dataDir,
        PORT: String(port),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    try {
      await waitReady(`http://127.0.0.1:${port}`);
      await makeData(`http://127.0.0.1:${port}`, dataDir);
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.on('exit', resolve));
    }
    const short = (
      await new Promise<string>((resolve, reject) => {
        const git = spawn('git', ['rev-parse', '--short=7', commit], { cwd: ROOT });
        let out = '';
        git.stdout.on('data', (c: Buffer) => (out += c.toString()));
        git.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error('git rev-parse failed'))));
      })
    ).trim();
    const sql = await fixtureSql(url, short, path.join(source, 'migrations'));
    const out = path.join(ROOT, 'test', 'fixtures', `upgrade-from-${short}.sql`);
    await fs.mkdir(path.dirname(out), { recursive: true });
    await fs.writeFile(out, sql);
    process.stdout.write(`wrote ${path.relative(ROOT, out)}\n`);
  } finally {
    await server.stop();
    await fs.rm(work, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
