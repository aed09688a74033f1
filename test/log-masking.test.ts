/**
 * Secret masking in stored logs (docs/logs.md, "Secret masking"), the attacker's side: an app that
 * prints a secret base64- or URL-encoded (an Authorization header, a connection URL, a token in a
 * query string) must not get it into the log either.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createLogWriter, MAX_LINE_CHARS } from '../src/dataplane/log-writer.ts';
import { createLogger } from '../src/logger.ts';
import { createOwnPlaneReports } from '../src/service/lifecycle-reports.ts';
import { client, createTestApp, type TestApp } from './support/harness.ts';

let t: TestApp;
let revisions = 0;

before(async () => {
  t = await createTestApp();
});
after(() => t.close());

/** The own data plane's reports, as its worker gets them (the lifecycle's): the log writer stores through them. */
const reportsOf = (db: Parameters<typeof createOwnPlaneReports>[0]) =>
  createOwnPlaneReports(db, { owner: { id: 'test-node/1', nodePrefix: 'test-node/' }, leaseSeconds: 30 });

const SECRET = "p@ss w0rd/+?&=é~*'!-42";
const TOKEN = 'sk-live-0123456789abcdef';

/** Writes `lines` through a log writer that masks SECRET and TOKEN; resolves to what was stored. */
async function stored(lines: string[]): Promise<string[]> {
  revisions += 1;
  const created = await client(t.app).post('/v2/deployments', {
    name: `masking-${revisions}`,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
  });
  assert.equal(created.status, 201);
  const revisionId = created.body.latest_revision_id as string;
  const log = createLogWriter({
    db: t.database.db,
    reports: reportsOf(t.database.db),
    revisionId,
    type: 'build',
    maxLines: 1000,
    redact: [SECRET, TOKEN],
    logger: createLogger('silent'),
  });
  for (const line of lines) log.write('stdout', `${line}\n`);
  await log.close();
  const rows = await t.database.db
    .selectFrom('revision_logs')
    .select('line')
    .where('revision_id', '=', revisionId)
    .orderBy('id')
    .execute();
  return rows.map((row) => row.line);
}

const b64 = (text: string) => Buffer.from(text).toString('base64');
const b64url = (text: string) => Buffer.from(text).toString('base64url');

/** Whether any base64 run of `line` (standard or URL-safe, at any offset) decodes to text holding `secret`. */
function decodesTo(line: string, secret: string): boolean {
  for (const run of line.match(/[A-Za-z0-9+/_-]{4,}={0,2}/g) ?? []) {
    for (let skip = 0; skip < 4; skip++) {
      const part = run.slice(skip);
      for (const encoding of ['base64', 'base64url'] as const) {
        if (Buffer.from(part, encoding).toString('utf8').includes(secret)) return true;
        if (Buffer.from(part, encoding).toString('latin1').includes(secret)) return true;
      }
    }
  }
  return false;
}

/** Whether percent-decoding `line` (with + as a space) reveals `secret`. */
function urlDecodesTo(line: string, secret: string): boolean {
  try {
    return decodeURIComponent(line.replaceAll('+', ' ')).includes(secret);
  } catch {
    return line.includes(secret);
  }
}

test('the base64 of a secret is masked: standard and URL-safe, padded or not', async () => {
  const printed = [
    `Authorization: Bearer ${b64(SECRET)}`,
    `token=${b64(TOKEN).replace(/=+$/, '')}.`,
    `cookie: session=${b64url(SECRET)}`,
    `padded url-safe ${b64url(TOKEN)}==`,
  ];
  const lines = await stored(printed);
  for (const [i, line] of lines.entries()) {
    assert.ok(line.includes('********'), `masked: ${line}`);
    assert.ok(!decodesTo(line, SECRET) && !decodesTo(line, TOKEN), `nothing decodes to a secret: ${line}`);
    assert.notEqual(line, printed[i]);
  }
});

test('a secret inside a longer base64 text is masked whatever its offset', async () => {
  const printed: string[] = [];
  for (const secret of [SECRET, TOKEN]) {
    for (const before of ['', 'a', 'ab', 'user:', '{"token":"']) {
      for (const after of ['', 'z', 'yz', '","expires":3600}']) {
        printed.push(`Authorization: Basic ${b64(before + secret + after)}`);
        printed.push(`jwt ${b64url(before + secret + after)}`);
      }
    }
  }
  const lines = await stored(printed);
  assert.equal(lines.length, printed.length);
  for (const line of lines) {
    assert.ok(line.includes('********'), `masked: ${line}`);
    assert.ok(!decodesTo(line, SECRET) && !decodesTo(line, TOKEN), `nothing decodes to a secret: ${line}`);
  }
});

test('the URL encoding of a secret is masked, as any common encoder writes it', async () => {
  const strict = (text: string) =>
    encodeURIComponent(text).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const printed = [
    `GET /callback?password=${encodeURIComponent(SECRET)}&next=/`,
    `form: ${new URLSearchParams({ password: SECRET }).toString()}`,
    `postgres://app:${strict(SECRET)}@db:5432/app`,
    `lower: ${encodeURIComponent(SECRET).replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase())}`,
    `python quote_plus: ${strict(SECRET).replaceAll('%20', '+')}`,
    `path ${encodeURI(SECRET)}`,
  ];
  const lines = await stored(printed);
  for (const line of lines) {
    assert.ok(line.includes('********'), `masked: ${line}`);
    assert.ok(!urlDecodesTo(line, SECRET), `nothing decodes to the secret: ${line}`);
  }
});

test('text that merely looks encoded stays as it is', async () => {
  const printed = [
    'GET /health 200 in 3 ms',
    `base64 of something else: ${b64('another value entirely, not a secret')}`,
    'percent: 100% done, a%20b',
  ];
  assert.deepEqual(await stored(printed), printed);
});

test('a long line cut at 16 KiB never leaves part of an encoded secret behind', async () => {
  const encoded = encodeURIComponent(SECRET);
  const lines: string[] = [];
  for (let shift = 1; shift < encoded.length; shift += 3) {
    const line = `${'x'.repeat(MAX_LINE_CHARS - shift)}${encoded}${'y'.repeat(10)}`;
    lines.push(line);
  }
  for (const line of await stored(lines)) {
    const kept = line.replace(/ \[line cut: .*\]$/, '').replace(/^x+/, '');
    assert.ok(!kept.startsWith('p%40'), `no encoded start is left: ${kept}`);
    assert.ok(!urlDecodesTo(kept, 'p@ss w0rd'), kept);
  }
});
