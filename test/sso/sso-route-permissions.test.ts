/**
 * The table "Who may do what" of docs/api.md, walked with sign-in sessions instead of keys: a person
 * whose mapping makes them a member, a workspace admin or an organization admin gets, operation by
 * operation, what a key of that kind gets (test/route-permissions.test.ts walks the keys). A refusal is
 * 403 `forbidden` and changes nothing, and the cookie opens no operation the table keeps for another
 * credential.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { client } from '../support/harness.ts';
import { createSsoTestApp, signIn, type SsoTestApp } from './sso-harness.ts';

type Cell = 'yes' | 'no' | 'open' | 'credential';
const ROLES = ['member', 'workspace admin', 'organization admin'] as const;
type Role = (typeof ROLES)[number];

async function permissionTable(): Promise<{ operation: string; cells: Record<Role, Cell> }[]> {
  const text = await fs.readFile(new URL('../../docs/api.md', import.meta.url), 'utf8');
  const section = text.split('\n## Who may do what\n')[1]?.split('\n## ')[0];
  assert.ok(section, 'docs/api.md has a section "Who may do what"');
  const rows = [];
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((cell) => cell.trim());
    const operation = /^`([A-Z]+ \S+)`$/.exec(cells[1] ?? '')?.[1];
    if (operation === undefined) continue;
    const [member, workspaceAdmin, organizationAdmin] = cells.slice(2, 5) as Cell[];
    rows.push({
      operation,
      cells: { member: member!, 'workspace admin': workspaceAdmin!, 'organization admin': organizationAdmin! },
    });
  }
  return rows;
}

let t: SsoTestApp;
let people: Record<Role, { session: string; tenant?: string }>;

before(async () => {
  t = await createSsoTestApp();
  const org = client(t.app, t.orgKey);
  // Two workspaces, so that the organization admin must say which one it acts in.
  assert.equal((await org.post('/v2/workspaces', { name: 'elsewhere' })).status, 201);
  for (const [group, workspace, role] of [
    ['members', t.workspaceId, 'member'],
    ['admins', t.workspaceId, 'admin'],
    ['org-admins', null, 'admin'],
  ] as const) {
    const mapped = await org.post('/v2/sso/mappings', { kind: 'group', value: group, workspace_id: workspace, role });
    assert.equal(mapped.status, 201);
  }
  const person = async (login: string, group: string) => {
    t.provider.accounts.set(login, { groups: [group] });
    const done = await signIn(t, login);
    assert.equal(done.status, 200, done.page);
    return done.session!;
  };
  people = {
    member: { session: await person('mia', 'members') },
    'workspace admin': { session: await person('walt', 'admins') },
    'organization admin': { session: await person('olga', 'org-admins'), tenant: t.workspaceId },
  };
});
after(() => t?.close());

/** The operation called with ids that do not exist and an empty body, as the dashboard would send it. */
async function send(operation: string, as: { session: string; tenant?: string } | null) {
  const [method, path] = operation.split(' ') as [string, string];
  let url = path.replace(/\{[a-z_]+\}/g, () => randomUUID());
  if (url.startsWith('/v2/auth/wait/')) url += '?timeout=0';
  const body = ['POST', 'PUT', 'PATCH'].includes(method) ? '{}' : undefined;
  const response = await t.app.inject({
    method: method as 'GET',
    url,
    headers: {
      ...(as ? { cookie: `slipway_session=${as.session}`, origin: t.publicUrl, 'sec-fetch-site': 'same-origin' } : {}),
      ...(as?.tenant ? { 'x-tenant-id': as.tenant } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { payload: body } : {}),
  });
  let code: unknown;
  try {
    code = (JSON.parse(response.body) as { code?: unknown }).code;
  } catch {
    code = undefined; // a page (a callback) or metrics text
  }
  return { status: response.statusCode, code, text: response.body };
}

test('a signed-in person gets, operation by operation, what a key of their role gets; refusals change nothing', async () => {
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
    // Signing out with the cookie ends the session (test/sso/sso-sessions.test.ts); the walk needs it.
    if (row.operation === 'POST /v2/sso/logout') continue;
    // The listener protocol is for machines: a session opens none of it, whatever the table says of keys.
    const protocol =
      /^\w+ \/v2\/listeners\/\{listener_id\}\/(desired-state|reports|endpoint-reports|deletions|heartbeat)$/.test(
        row.operation,
      );
    for (const role of ROLES) {
      const cell = row.cells[role];
      const answer = await send(row.operation, people[role]);
      const said = `${row.operation} as ${role}: table '${cell}', answer ${answer.status} ${answer.text.slice(0, 160)}`;
      if (protocol) {
        if (answer.status !== 401) wrong.push(`${said}; a session must not open the listener protocol`);
        continue;
      }
      if (cell === 'yes' && (answer.status === 401 || answer.status === 403 || answer.status >= 500)) wrong.push(said);
      if (cell === 'no' && (answer.status !== 403 || answer.code !== 'forbidden')) wrong.push(said);
      if (cell === 'credential' && (answer.status < 400 || answer.status >= 500)) wrong.push(said);
      if (cell === 'open' && (answer.status === 401 || answer.status === 403 || answer.status >= 500)) wrong.push(said);
      if (cell === 'open' || cell === 'credential') {
        // The cookie plays no part: the same answer without it.
        const without = await send(row.operation, null);
        if (without.status !== answer.status) wrong.push(`${said}; without the cookie ${without.status}`);
      }
    }
  }
  assert.deepEqual(wrong, [], 'answers to sessions that are not what docs/api.md, "Who may do what", says');
  assert.equal(await countEvents(), eventsBefore, 'nothing changed');
});
