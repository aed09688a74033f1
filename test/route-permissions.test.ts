/**
 * The table "Who may do what" of docs/api.md, walked: every operation the app serves (read from its own
 * OpenAPI document, so a new operation without a row fails here) called with a member key, a workspace
 * admin key and an organization admin key, each answered as the table promises. A refusal is 403
 * `forbidden` and changes nothing.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { ADMIN_KEY, client, createTestApp, type TestApp } from './support/harness.ts';

type Cell = 'yes' | 'no' | 'open' | 'credential';
const ROLES = ['member', 'workspace admin', 'organization admin'] as const;
type Role = (typeof ROLES)[number];
interface Row {
  operation: string;
  cells: Record<Role, Cell>;
}

/** The rows of the table under "## Who may do what" in docs/api.md. */
async function permissionTable(): Promise<Row[]> {
  const text = await fs.readFile(new URL('../docs/api.md', import.meta.url), 'utf8');
  const section = text.split('\n## Who may do what\n')[1]?.split('\n## ')[0];
  assert.ok(section, 'docs/api.md has a section "Who may do what"');
  const rows: Row[] = [];
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((cell) => cell.trim());
    const operation = /^`([A-Z]+ \S+)`$/.exec(cells[1] ?? '')?.[1];
    if (operation === undefined) continue;
    const [member, workspaceAdmin, organizationAdmin] = cells.slice(2, 5) as Cell[];
    for (const cell of [member, workspaceAdmin, organizationAdmin])
      assert.ok(['yes', 'no', 'open', 'credential'].includes(cell!), `${operation}: unknown cell '${cell}'`);
    rows.push({
      operation,
      cells: { member: member!, 'workspace admin': workspaceAdmin!, 'organization admin': organizationAdmin! },
    });
  }
  return rows;
}

let t: TestApp;
let keys: Record<Role, { key: string; tenant?: string }>;
let operations: string[];

before(async () => {
  t = await createTestApp();
  const orgWide = client(t.app, t.orgKey);
  // Two workspaces, so that the organization key must say which one it acts in.
  assert.equal((await orgWide.post('/v2/workspaces', { name: 'elsewhere' })).status, 201);
  const member = await client(t.app).post('/v2/api-keys', { name: 'member', role: 'member' });
  assert.equal(member.status, 201);
  keys = {
    member: { key: member.body.key },
    'workspace admin': { key: ADMIN_KEY },
    'organization admin': { key: t.orgKey, tenant: t.workspaceId },
  };
  const document = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
  operations = [];
  for (const [path, item] of Object.entries<Record<string, unknown>>(document.paths)) {
    for (const method of ['get', 'put', 'post', 'patch', 'delete']) {
      if (item[method] !== undefined) operations.push(`${method.toUpperCase()} ${path}`);
    }
  }
});
after(() => t.close());

/** The operation called with ids that do not exist and an empty body: the answer is about who asks. */
function requestOf(operation: string): { method: string; url: string; body?: string } {
  const [method, path] = operation.split(' ') as [string, string];
  let url = path.replace(/\{[a-z_]+\}/g, () => randomUUID());
  // Long polls answer at once.
  if (url.startsWith('/v2/auth/wait/')) url += '?timeout=0';
  return { method, url, ...(['POST', 'PUT', 'PATCH'].includes(method) ? { body: '{}' } : {}) };
}

async function send(operation: string, as: { key: string; tenant?: string } | null) {
  const { method, url, body } = requestOf(operation);
  const response = await t.app.inject({
    method: method as 'GET',
    url,
    headers: {
      ...(as ? { 'x-api-key': as.key } : {}),
      ...(as?.tenant ? { 'x-tenant-id': as.tenant } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { payload: body } : {}),
  });
  const text = response.body;
  let code: unknown;
  try {
    code = (JSON.parse(text) as { code?: unknown }).code;
  } catch {
    code = undefined; // a page (the OAuth callback) or metrics text
  }
  return { status: response.statusCode, code, text };
}

test('every operation of the service has exactly one row in the table, and every row is an operation', async () => {
  const rows = await permissionTable();
  const listed = rows.map((row) => row.operation);
  assert.deepEqual(
    listed.filter((operation, i) => listed.indexOf(operation) !== i),
    [],
    'operations listed twice',
  );
  assert.deepEqual(
    operations.filter((operation) => !listed.includes(operation)),
    [],
    'operations without a row in docs/api.md, "Who may do what"',
  );
  assert.deepEqual(
    listed.filter((operation) => !operations.includes(operation)),
    [],
    'rows of docs/api.md, "Who may do what", that are no operation',
  );
});

test('every operation answers each kind of key as the table says; refusals change nothing', async () => {
  const rows = await permissionTable();
  const countEvents = async () =>
    (
      await t.database.db
        .selectFrom('events')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow()
    ).n;
  const eventsBefore = await countEvents();
  const wrong: string[] = [];
  for (const row of rows) {
    if (!operations.includes(row.operation)) continue;
    for (const role of ROLES) {
      const cell = row.cells[role];
      const answer = await send(row.operation, keys[role]);
      const said = `${row.operation} as ${role}: table '${cell}', answer ${answer.status} ${answer.text.slice(0, 160)}`;
      if (cell === 'yes' && (answer.status === 401 || answer.status === 403 || answer.status >= 500)) wrong.push(said);
      if (cell === 'no' && (answer.status !== 403 || answer.code !== 'forbidden')) wrong.push(said);
      if (cell === 'credential' && (answer.status < 400 || answer.status >= 500)) wrong.push(said);
      if (cell === 'open' || cell === 'credential') {
        // The API key plays no part: the same answer without it.
        const without = await send(row.operation, null);
        if (cell === 'open' && (without.status === 401 || without.status === 403 || without.status >= 500))
          wrong.push(`${said}; without a key ${without.status}`);
        if (without.status !== answer.status) wrong.push(`${said}; without a key ${without.status}`);
      }
    }
  }
  assert.deepEqual(wrong, [], 'answers that are not what docs/api.md, "Who may do what", says');
  assert.equal(await countEvents(), eventsBefore, 'nothing changed');
});

test('a key without the role the table asks for is refused before its request is read', async () => {
  // A refusal does not depend on the request being valid: a member asking to create a listener with a
  // body that would be 422 still gets 403, and one with a valid body is refused the same way.
  const member = client(t.app, keys.member.key);
  const valid = await member.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'member-cluster' });
  const invalid = await member.post('/v2/listeners', { compute_type: 'nomad' });
  assert.deepEqual([valid.status, invalid.status], [403, 403]);
  assert.equal((await client(t.app).get('/v2/listeners')).body.resources.length, 0);
});
