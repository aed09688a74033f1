/**
 * The guard of /mcp and /a2a (runtime/langgraph/protocol-auth.mjs) where the server test cannot reach:
 * it never lets a request through when it cannot ask Slipway (503, fail closed), a setting it does not
 * know counts as `credential`, a project's custom auth takes over, and a yes is asked once per 10 s.
 * The whole path, with the official clients and a real Slipway, is in protocols.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-expect-error: a plain module of the app-side server, without types.
import { createProtocolAuth } from '../../runtime/langgraph/protocol-auth.mjs';

const silent = { info() {}, warn() {} };
const OWN = `slwp_${'a'.repeat(43)}`;

/** The guard's middleware as the server mounts it, and a request through it: the status, or 'passed'. */
function guardOf(env: Record<string, string>, fetchImpl: typeof fetch, options: Record<string, unknown> = {}) {
  const middleware: ((c: unknown, next: () => Promise<void>) => Promise<Response | undefined>)[] = [];
  const auth = createProtocolAuth({ options, logger: silent, env, fetchImpl });
  auth.register({ use: (_path: string, handler: (typeof middleware)[number]) => middleware.push(handler), get() {} });
  return {
    mode: auth.mode as string,
    async call(path: string, authorization?: string): Promise<number | 'passed'> {
      if (middleware.length === 0) return 'passed';
      const raw = new Request(`http://127.0.0.1${path}`, {
        method: 'POST',
        headers: authorization ? { authorization } : {},
      });
      let passed = false;
      const answer = await middleware[0]!({ req: { raw } }, async () => {
        passed = true;
      });
      return passed ? 'passed' : answer!.status;
    },
  };
}

const env = {
  SLIPWAY_PROTOCOLS_AUTH: 'credential',
  SLIPWAY_API_URL: 'http://slipway.test',
  SLIPWAY_AGENT_CREDENTIAL: 'slwa_x',
};

test('Slipway down, or no way to ask it: 503, never through', async () => {
  const down = guardOf(env, async () => {
    throw new TypeError('fetch failed');
  });
  assert.equal(await down.call('/mcp', `Bearer ${OWN}`), 503);
  assert.equal(await down.call('/a2a/chat', `Bearer ${OWN}`), 503);
  const broken = guardOf(env, async () => new Response('no', { status: 500 }));
  assert.equal(await broken.call('/mcp', `Bearer ${OWN}`), 503);
  const unset = guardOf({ SLIPWAY_PROTOCOLS_AUTH: 'credential' }, async () => Response.json({ valid: true }));
  assert.equal(await unset.call('/mcp', `Bearer ${OWN}`), 503);
});

test('a setting it does not know counts as credential; open and custom auth add nothing', async () => {
  const yes = async () => Response.json({ valid: true, credential_id: null });
  assert.equal(guardOf({ ...env, SLIPWAY_PROTOCOLS_AUTH: 'closed' }, yes).mode, 'credential');
  assert.equal(await guardOf({ ...env, SLIPWAY_PROTOCOLS_AUTH: 'Closed' }, yes).call('/mcp'), 401);
  assert.equal(guardOf({}, yes).mode, 'open');
  assert.equal(guardOf({ ...env, SLIPWAY_PROTOCOLS_AUTH: 'open' }, yes).mode, 'open');
  assert.equal(guardOf(env, yes, { auth: { path: './src/auth.mjs:auth' } }).mode, 'custom');
});

test('a yes is kept for a while, a no is not; other paths are not its business', async () => {
  let asked = 0;
  let valid = true;
  const guard = guardOf(env, async () => {
    asked += 1;
    return Response.json({ valid, credential_id: null });
  });
  assert.equal(await guard.call('/mcp', `Bearer ${OWN}`), 'passed');
  assert.equal(await guard.call('/a2a/chat', `Bearer ${OWN}`), 'passed');
  assert.equal(asked, 1);
  valid = false;
  const other = `slwp_${'b'.repeat(43)}`;
  assert.equal(await guard.call('/mcp', `Bearer ${other}`), 401);
  assert.equal(await guard.call('/mcp', `Bearer ${other}`), 401);
  assert.equal(asked, 3);
  assert.equal(await guard.call('/threads'), 'passed');
});
