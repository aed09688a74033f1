/**
 * Signing in through the identity provider, and every way an attacker could try to sign in as someone
 * else: an ID token the provider never signed (forged key, alg none, claims edited under the real
 * signature), a wrong nonce, a state that is not this browser's (login CSRF), a replayed callback, a
 * code moved to another sign-in. Each refusal leaves no session and no session cookie.
 */
import assert from 'node:assert/strict';
import { createSign, generateKeyPairSync } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import { hashToken } from '../../src/sso/sso-service.ts';
import { unreachableUrl } from '../fakes/oidc-server.ts';
import { createTestClock } from '../support/clock.ts';
import { client } from '../support/harness.ts';
import {
  asPerson,
  cookieFrom,
  createSsoTestApp,
  finishSignIn,
  signIn,
  startSignIn,
  type SsoTestApp,
} from './sso-harness.ts';

/** What a man in the middle of the token endpoint does to the ID token, while it is set. */
let tamper: ((idToken: string) => string) | null = null;

let t: SsoTestApp;

/** The OAuth state of a callback (the state cookie is the sign-in sealed, not this). */
const stateOf = (callbackPath: string) => new URL(callbackPath, 'http://x').searchParams.get('state')!;
const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const partsOf = (jwt: string) => {
  const [header, payload] = jwt.split('.');
  return {
    header: JSON.parse(Buffer.from(header!, 'base64url').toString()) as Record<string, unknown>,
    payload: JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>,
  };
};

/** The service's clock: moved, not waited for, to see a sign-in expire. */
const clock = createTestClock();

before(async () => {
  t = await createSsoTestApp({
    now: clock.now,
    // The token endpoint's answer passes through here; with `tamper` set, its ID token is replaced.
    ssoFetch: async (url, init) => {
      const response = await fetch(url, init);
      if (tamper === null || url !== t.provider.tokenEndpoint || !response.ok) return response;
      const body = (await response.json()) as Record<string, unknown>;
      body.id_token = tamper(String(body.id_token));
      return new Response(JSON.stringify(body), { status: response.status, headers: response.headers });
    },
  });
  const admin = client(t.app, t.orgKey);
  const mapped = await admin.post('/v2/sso/mappings', {
    kind: 'group',
    value: 'platform',
    workspace_id: t.workspaceId,
    role: 'member',
  });
  assert.equal(mapped.status, 201, JSON.stringify(mapped.body));
  t.provider.accounts.set('alice', { groups: ['platform'] });
  t.provider.accounts.set('mallory', { groups: ['platform'] });
  t.provider.accounts.set('outsider', { groups: ['marketing'] });
});
after(() => t?.close());

async function sessionCount(): Promise<number> {
  const row = await t.database.db
    .withTables<{ sso_sessions: { id: string } }>()
    .selectFrom('sso_sessions')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

describe('an honest sign-in', () => {
  test('opens a session: an HttpOnly, SameSite=Lax, host-only cookie, stored only as its hash', async () => {
    const done = await signIn(t, 'alice');
    assert.equal(done.status, 200, done.page);
    assert.match(done.page, /Signed in as alice@example\.test/);
    assert.ok(done.session, 'a session cookie');
    assert.match(done.sessionLine!, /HttpOnly/);
    assert.match(done.sessionLine!, /SameSite=Lax/);
    assert.match(done.sessionLine!, /Path=\//);
    assert.match(done.sessionLine!, /Max-Age=43200/, 'the default lifetime, 12 hours');
    assert.doesNotMatch(done.sessionLine!, /Domain=/i, 'host-only: never sent to the apps host names');
    assert.doesNotMatch(done.sessionLine!, /Secure/, 'plain http here; https makes it Secure (below)');
    assert.equal(cookieFrom(done.setCookie, 'slipway_sso_state')?.value, '', 'the state cookie is removed');

    const rows = await t.database.db
      .withTables<{ sso_sessions: { id: string; token_hash: Buffer; email: string | null } }>()
      .selectFrom('sso_sessions')
      .selectAll()
      .execute();
    const mine = rows.find((r) => r.token_hash.equals(hashToken(done.session!)));
    assert.ok(mine, 'the row holds the SHA-256 of the token');
    assert.equal(mine.email, 'alice@example.test');
    assert.ok(!JSON.stringify(rows).includes(done.session), 'the token itself is stored nowhere');

    const status = await asPerson(t, done.session, 'GET', '/v2/sso/session');
    assert.equal(status.status, 200);
    assert.equal(status.body.session.email, 'alice@example.test');
    assert.deepEqual(
      status.body.session.workspaces.map((w: { id: string; role: string }) => [w.id, w.role]),
      [[t.workspaceId, 'member']],
    );
    const listed = await asPerson(t, done.session, 'GET', '/v2/deployments');
    assert.equal(listed.status, 200, 'the cookie opens the API like a key of the workspace');
  });

  test('with an https public URL the cookie is Secure and __Host- prefixed', async () => {
    const https = await createSsoTestApp({ env: { SLIPWAY_PUBLIC_URL: 'https://slipway.example.test' } });
    try {
      const start = await https.app.inject({
        method: 'POST',
        url: '/v2/sso/login',
        headers: { 'content-type': 'application/json' },
        payload: '{}',
      });
      assert.equal(start.statusCode, 200, start.body);
      const state = cookieFrom(start.headers['set-cookie'], '__Host-slipway_sso_state');
      assert.ok(state, 'the state cookie has the __Host- prefix');
      assert.match(state.line, /; Secure/);
      assert.match(state.line, /HttpOnly/);
      const url = new URL(start.json<{ url: string }>().url);
      assert.equal(url.searchParams.get('redirect_uri'), 'https://slipway.example.test/v2/sso/callback');
      assert.equal(url.searchParams.get('code_challenge_method'), 'S256');
      assert.ok(url.searchParams.get('nonce'), 'a nonce');
      assert.equal(
        JSON.parse(https.secretBox.open(state.value)).s,
        url.searchParams.get('state'),
        'the cookie holds the state the provider sends back, sealed',
      );
      assert.ok(state.value.length > 256 && state.value.length <= 2048, `a sealed sign-in: ${state.value.length}`);
      assert.match(state.value, /^[A-Za-z0-9._-]+$/, 'cookie-safe as it is');
    } finally {
      await https.close();
    }
  });

  test('a provider that cannot be reached: the sign-in start says so (502), and nothing is stored', async () => {
    const down = await createSsoTestApp({ env: { SLIPWAY_SSO_ISSUER: await unreachableUrl('') } });
    try {
      const start = await down.app.inject({
        method: 'POST',
        url: '/v2/sso/login',
        headers: { 'content-type': 'application/json' },
        payload: '{}',
      });
      assert.equal(start.statusCode, 502, start.body);
      assert.match(start.json<{ detail: string }>().detail, /identity provider could not be reached/);
      assert.equal(cookieFrom(start.headers['set-cookie'], 'slipway_sso_state'), null);
    } finally {
      await down.close();
    }
  });

  test('a person no mapping lets in gets a clear page, and no session', async () => {
    const before = await sessionCount();
    const done = await signIn(t, 'outsider');
    assert.equal(done.status, 403);
    assert.match(done.page, /No access to Slipway/);
    assert.match(done.page, /outsider@example\.test/);
    assert.match(done.page, /marketing/, 'the page says which groups the provider named');
    assert.match(done.page, /Ask an organization admin/);
    assert.equal(done.session, null);
    assert.equal(await sessionCount(), before);
  });

  test('an e-mail domain mapping lets in verified addresses of the domain only', async () => {
    const admin = client(t.app, t.orgKey);
    const mapped = await admin.post('/v2/sso/mappings', {
      kind: 'email_domain',
      value: '@Partner.Example',
      workspace_id: t.workspaceId,
      role: 'member',
    });
    assert.equal(mapped.status, 201);
    assert.equal(mapped.body.value, 'partner.example', 'stored in lower case without @');
    t.provider.accounts.set('claimed', { email: 'boss@partner.example', email_verified: false });
    const unverified = await signIn(t, 'claimed');
    assert.equal(unverified.status, 403, 'an unverified address proves nothing about its domain');
    assert.equal(unverified.session, null);
    t.provider.accounts.set('partner', { email: 'dev@partner.example', email_verified: true });
    const verified = await signIn(t, 'partner');
    assert.equal(verified.status, 200, verified.page);
    assert.ok(verified.session);
    assert.equal((await admin.delete(`/v2/sso/mappings/${mapped.body.id}`)).status, 204);
  });
});

describe('sign-ins under way, and signing in again', () => {
  test('signing in again in the same browser ends the session it had', async () => {
    const first = await signIn(t, 'alice');
    assert.ok(first.session);
    const again = await startSignIn(t, 'alice');
    const second = await finishSignIn(t, again.callbackPath, again.state, first.session);
    assert.equal(second.status, 200);
    assert.ok(second.session && second.session !== first.session, 'a new token');
    assert.equal((await asPerson(t, first.session, 'GET', '/v2/deployments')).status, 401, 'the old one is over');
    assert.equal((await asPerson(t, second.session, 'GET', '/v2/deployments')).status, 200);
  });

  test('starting a sign-in stores nothing: the browser holds it, sealed, and cannot read or change it', async () => {
    const tables = async () =>
      (
        await t.database.db
          .selectFrom((eb) =>
            eb
              .selectFrom('sso_used_states')
              .select('state_hash')
              .union(eb.selectFrom('sso_sessions').select('token_hash as state_hash'))
              .as('rows'),
          )
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .executeTakeFirstOrThrow()
      ).n;
    const before = await tables();
    const attempt = await startSignIn(t, 'alice', '/deployments');
    assert.equal(await tables(), before, 'no row for a sign-in under way');
    const opened = JSON.parse(t.secretBox.open(attempt.state)) as Record<string, unknown>;
    assert.equal(opened.s, stateOf(attempt.callbackPath));
    assert.ok(!attempt.state.includes(String(opened.v)), 'the PKCE verifier is not readable in the cookie');
    // One character of the sealed value changed: the cookie no longer opens.
    const at = attempt.state.length - 5;
    const flipped = `${attempt.state.slice(0, at)}${attempt.state[at] === 'A' ? 'B' : 'A'}${attempt.state.slice(at + 1)}`;
    const sessionsBefore = await sessionCount();
    const forged = await finishSignIn(t, attempt.callbackPath, flipped);
    assert.equal(forged.status, 400, forged.page);
    assert.equal(forged.session, null);
    assert.equal(await sessionCount(), sessionsBefore);
    assert.equal((await finishSignIn(t, attempt.callbackPath, attempt.state)).status, 200, 'the real cookie works');
  });

  test('a callback that gets no code accepted records nothing, so anonymous callbacks fill no table', async () => {
    const used = async () =>
      Number(
        (
          await t.database.db
            .selectFrom('sso_used_states')
            .select((eb) => eb.fn.countAll<string>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    const before = await used();
    for (let i = 0; i < 3; i++) {
      const attempt = await startSignIn(t, 'alice');
      // The browser's own cookie and state, with a code the provider never gave.
      const made = attempt.callbackPath.replace(/code=[^&]+/, 'code=made-up');
      assert.equal((await finishSignIn(t, made, attempt.state)).status, 400);
    }
    assert.equal(await used(), before);
    const real = await startSignIn(t, 'alice');
    assert.equal((await finishSignIn(t, real.callbackPath, real.state)).status, 200);
    assert.equal(await used(), before + 1, 'a sign-in that got through is recorded, against replay');
  });

  test("a sign-in cookie past its ten minutes on the service's clock is refused; a used one's mark goes with them", async () => {
    const usedMarks = async () =>
      (await t.database.db.selectFrom('sso_used_states').select('state_hash').execute()).length;
    const onTime = await startSignIn(t, 'alice');
    const late = await startSignIn(t, 'alice');
    clock.advance(9 * 60_000);
    assert.equal((await finishSignIn(t, onTime.callbackPath, onTime.state)).status, 200, 'nine minutes on: still good');
    assert.ok((await usedMarks()) >= 1, 'the finished sign-in is marked used');
    clock.advance(2 * 60_000);
    const before = await sessionCount();
    const done = await finishSignIn(t, late.callbackPath, late.state);
    assert.equal(done.status, 400, done.page);
    assert.match(done.page, /finished already or has expired/);
    assert.equal(done.session, null);
    assert.equal(await sessionCount(), before);
    // The next sign-in that gets through drops the marks of sign-ins expired by now: only its own is left.
    const next = await startSignIn(t, 'alice');
    assert.equal((await finishSignIn(t, next.callbackPath, next.state)).status, 200);
    assert.equal(await usedMarks(), 1, 'the expired marks are dropped');
  });

  test('a value the service sealed for something else does not pass for a sign-in cookie', async () => {
    const attempt = await startSignIn(t, 'alice');
    const opened = JSON.parse(t.secretBox.open(attempt.state)) as Record<string, unknown>;
    const before = await sessionCount();
    for (const other of [t.secretBox.seal(String(opened.s)), t.secretBox.seal(JSON.stringify({ ...opened, p: 'x' }))]) {
      const done = await finishSignIn(t, attempt.callbackPath, other);
      assert.equal(done.status, 400, done.page);
      assert.equal(done.session, null);
    }
    assert.equal(await sessionCount(), before);
  });
});

describe('forged and replayed sign-ins', () => {
  const NOT_SIGNED = /not signed with the identity provider(&#39;|')s keys/;
  const refused = async (
    done: Awaited<ReturnType<typeof finishSignIn>>,
    before: number,
    status: number,
    why?: RegExp,
  ) => {
    assert.equal(done.status, status, done.page);
    if (why) assert.match(done.page, why);
    assert.match(done.page, /Sign-in failed/);
    assert.match(done.page, /You are not signed in/);
    assert.equal(done.session, null, 'no session cookie');
    assert.equal(await sessionCount(), before, 'no session row');
  };

  test('an ID token signed with another key (same kid) is refused', async () => {
    const before = await sessionCount();
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    tamper = (idToken) => {
      const { header, payload } = partsOf(idToken);
      // The attacker's own claims under the provider's key id, signed with the attacker's key.
      const input = `${b64(header)}.${b64({ ...payload, sub: 'ceo', email: 'ceo@example.test' })}`;
      return `${input}.${createSign('RSA-SHA256').update(input).sign(privateKey).toString('base64url')}`;
    };
    try {
      const attempt = await startSignIn(t, 'mallory');
      await refused(await finishSignIn(t, attempt.callbackPath, attempt.state), before, 502, NOT_SIGNED);
    } finally {
      tamper = null;
    }
  });

  test('an unsigned ID token (alg none) is refused', async () => {
    const before = await sessionCount();
    tamper = (idToken) => {
      const { payload } = partsOf(idToken);
      return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(payload)}.`;
    };
    try {
      const attempt = await startSignIn(t, 'mallory');
      await refused(await finishSignIn(t, attempt.callbackPath, attempt.state), before, 502);
    } finally {
      tamper = null;
    }
  });

  test("claims edited under the provider's real signature are refused", async () => {
    const before = await sessionCount();
    tamper = (idToken) => {
      const [header, , signature] = idToken.split('.');
      const { payload } = partsOf(idToken);
      return `${header}.${b64({ ...payload, groups: ['platform', 'admins'], email: 'ceo@example.test' })}.${signature}`;
    };
    try {
      const attempt = await startSignIn(t, 'mallory');
      await refused(await finishSignIn(t, attempt.callbackPath, attempt.state), before, 502, NOT_SIGNED);
    } finally {
      tamper = null;
    }
  });

  test('an ID token whose nonce is not the sign-in’s is refused', async () => {
    const before = await sessionCount();
    const attempt = await startSignIn(t, 'alice');
    // The sign-in expects another nonce than the one the provider put in its (genuine) ID token.
    const opened = JSON.parse(t.secretBox.open(attempt.state)) as Record<string, unknown>;
    const otherNonce = t.secretBox.seal(JSON.stringify({ ...opened, n: 'a-nonce-of-another-sign-in' }));
    await refused(await finishSignIn(t, attempt.callbackPath, otherNonce), before, 502);
  });

  test('an ID token whose nonce is the sign-in’s is accepted (the case above fails for its nonce only)', async () => {
    const attempt = await startSignIn(t, 'alice');
    const done = await finishSignIn(t, attempt.callbackPath, attempt.state);
    assert.equal(done.status, 200, done.page);
  });

  test('a callback without the state cookie of the browser that started it is refused (login CSRF)', async () => {
    const before = await sessionCount();
    // The attacker signs in as mallory and sends the victim the callback link: the victim's browser
    // holds no state cookie, or the one of a sign-in of its own.
    const attackers = await startSignIn(t, 'mallory');
    await refused(await finishSignIn(t, attackers.callbackPath, null), before, 400);
    const victims = await startSignIn(t, 'alice');
    await refused(await finishSignIn(t, attackers.callbackPath, victims.state), before, 400);
    // A state in the query changed to match the victim's cookie: the code is not the victim's sign-in's.
    const swapped = attackers.callbackPath.replace(/state=[^&]+/, `state=${stateOf(victims.callbackPath)}`);
    const done = await finishSignIn(t, swapped, victims.state);
    assert.notEqual(done.status, 200);
    assert.equal(done.session, null);
    assert.equal(await sessionCount(), before);
  });

  test('a callback replayed, or its code moved to a new sign-in, is refused', async () => {
    const attempt = await startSignIn(t, 'alice');
    const first = await finishSignIn(t, attempt.callbackPath, attempt.state);
    assert.equal(first.status, 200, first.page);
    const before = await sessionCount();
    const replay = await finishSignIn(t, attempt.callbackPath, attempt.state);
    await refused(replay, before, 400);
    assert.match(replay.page, /finished already or has expired/);

    // The used code under a fresh sign-in's state: the provider refuses it (used, and bound by PKCE to
    // the first sign-in's verifier).
    const fresh = await startSignIn(t, 'mallory');
    const code = new URL(attempt.callbackPath, t.publicUrl).searchParams.get('code')!;
    const moved = fresh.callbackPath.replace(/code=[^&]+/, `code=${encodeURIComponent(code)}`);
    await refused(await finishSignIn(t, moved, fresh.state), before, 400);
  });

  test('a provider that says no (the person cancelled) gets a page, and nothing else', async () => {
    const before = await sessionCount();
    const attempt = await startSignIn(t, 'alice');
    const denied = `/v2/sso/callback?error=access_denied&error_description=${encodeURIComponent('<b>nope</b>')}&state=${stateOf(attempt.callbackPath)}&iss=${encodeURIComponent(t.provider.issuer)}`;
    const done = await finishSignIn(t, denied, attempt.state);
    await refused(done, before, 400);
    assert.match(done.page, /access_denied/);
    assert.ok(!done.page.includes('<b>nope</b>'), 'the provider’s text is escaped');
  });

  test('return_to goes back to a dashboard path only, never to another site', async () => {
    for (const [asked, expected] of [
      ['/deployments/abc?x=1', '/deployments/abc?x=1'],
      ['https://evil.example/', '/'],
      ['//evil.example/', '/'],
      ['/\\evil.example', '/'],
      // The longest return_to still fits the state cookie the service reads back.
      [`/${'a'.repeat(511)}`, `/${'a'.repeat(511)}`],
    ] as const) {
      const attempt = await startSignIn(t, 'alice', asked);
      const done = await finishSignIn(t, attempt.callbackPath, attempt.state);
      assert.equal(done.status, 200);
      const escaped = expected.replace(/&/g, '&amp;');
      assert.ok(done.page.includes(`url=${escaped}"`), `${asked} returns to ${expected}: ${done.page}`);
    }
  });
});
