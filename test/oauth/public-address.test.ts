// The attacker's side of discovered URLs (src/oauth/public-address.ts, docs/oauth.md): an MCP server's
// metadata, or its DNS, tries to make Slipway call inside its own network. The outside is faked: host
// names resolve through the client's `resolve` option (no DNS server), and "inside" is a listener on
// 127.0.0.1 that counts the connections it gets.

import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import type { LookupAddress } from 'node:dns';
import { after, before, test } from 'node:test';
import { OAuthClient, type OAuthProviderConfig } from '../../src/oauth/oauth-client.ts';
import { OAuthFlowError } from '../../src/oauth/oauth-flow-error.ts';
import { findNotPublicAddress } from '../../src/oauth/public-address.ts';
import { publicOnlyDispatcher } from '../../src/oauth/public-only-dispatcher.ts';
import { fetch as undiciFetch } from 'undici';

/** Stands for a service inside Slipway's network: it only counts who connects. */
let inside: net.Server;
let insidePort: number;
let insideConnections = 0;

before(async () => {
  inside = net.createServer((socket) => {
    insideConnections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => inside.listen(0, '127.0.0.1', resolve));
  insidePort = (inside.address() as net.AddressInfo).port;
});

after(async () => {
  await new Promise<void>((resolve) => inside.close(() => resolve()));
});

const PUBLIC_V4: LookupAddress = { address: '93.184.215.14', family: 4 };
const LOOPBACK: LookupAddress = { address: '127.0.0.1', family: 4 };

/** A resolver that answers `answers[i]` to its i-th call (the last one from then on), and counts. */
function scriptedResolver(...answers: LookupAddress[][]) {
  const calls: string[] = [];
  const resolve = async (hostname: string) => {
    calls.push(hostname);
    return answers[Math.min(calls.length - 1, answers.length - 1)]!;
  };
  return { resolve, calls };
}

async function refusedAsNotPublic(promise: Promise<unknown>): Promise<OAuthFlowError> {
  const err = await promise.then(
    () => assert.fail('expected a refusal'),
    (error: unknown) => error,
  );
  assert.ok(err instanceof OAuthFlowError, String(err));
  assert.equal(err.reason, 'configuration', err.message);
  assert.match(
    err.message,
    /is, or resolves to, a loopback, private or link-local address, or another address that is not public/,
  );
  return err;
}

test('DNS rebinding: a name that is public for the check and loopback for the request is refused on connect', async () => {
  const { resolve, calls } = scriptedResolver([PUBLIC_V4], [LOOPBACK]);
  const client = new OAuthClient({ resolve });
  const before = insideConnections;
  const err = await refusedAsNotPublic(client.discoverMcpServer(`https://mcp.rebind.test:${insidePort}/mcp`));
  assert.match(err.message, /^mcp\.rebind\.test is, or resolves to, /);
  assert.doesNotMatch(err.message, /127\.0\.0\.1/, 'the resolved address is not told');
  assert.deepEqual(calls, ['mcp.rebind.test', 'mcp.rebind.test'], 'checked once before, once on connect');
  assert.equal(insideConnections, before, 'nothing connected to the inside');
});

test('DNS rebinding: a name with a public and a private address is refused, on connect as before', async () => {
  // The check would refuse it; here the first answer is public only, and the connection's is mixed.
  const { resolve } = scriptedResolver([PUBLIC_V4], [PUBLIC_V4, LOOPBACK]);
  const before = insideConnections;
  await refusedAsNotPublic(
    new OAuthClient({ resolve }).discoverMcpServer(`https://mixed.rebind.test:${insidePort}/mcp`),
  );
  assert.equal(insideConnections, before);
});

test("an MCP provider's discovered token endpoint that now resolves to loopback gets no request", async () => {
  // The endpoints were checked at discovery, maybe weeks ago; the name is the attacker's to repoint.
  const { resolve, calls } = scriptedResolver([LOOPBACK]);
  const client = new OAuthClient({ resolve });
  const tokenUrl = `https://as.rebind.test:${insidePort}/token`;
  const provider: OAuthProviderConfig = {
    auth_url: `https://as.rebind.test:${insidePort}/auth`,
    token_url: tokenUrl,
    revocation_url: `https://as.rebind.test:${insidePort}/revoke`,
    client_id: 'slipway',
    client_secret: 'secret',
    token_endpoint_auth_method: 'client_secret_post',
    uses_pkce: true,
    code_challenge_method: 'S256',
    issuer: `https://as.rebind.test:${insidePort}`,
    resource: `https://mcp.rebind.test/mcp`,
  };
  const before = insideConnections;
  await refusedAsNotPublic(client.refresh(provider, 'a-refresh-token'));
  await refusedAsNotPublic(client.revoke(provider, 'a-token'));
  assert.ok(calls.length >= 2, 'resolved on connect');
  assert.equal(insideConnections, before, 'no request reached the inside');
});

/** Every spelling of a non-public address that a URL can carry, as WHATWG URL parsing reads it. */
const NOT_PUBLIC_URLS = [
  // IPv4-mapped IPv6, both spellings (the URL parser turns the first into the second).
  'https://[::ffff:127.0.0.1]/mcp',
  'https://[::ffff:7f00:1]/mcp',
  'https://[::ffff:a9fe:a9fe]/mcp',
  // The deprecated IPv4-compatible form.
  'https://[::127.0.0.1]/mcp',
  // NAT64 (well-known prefix) around a private address, and the local-use NAT64 prefix.
  'https://[64:ff9b::127.0.0.1]/mcp',
  'https://[64:ff9b::a00:1]/mcp',
  'https://[64:ff9b:1::808:808]/mcp',
  // 6to4 around loopback and the metadata address.
  'https://[2002:7f00:1::]/mcp',
  'https://[2002:a9fe:a9fe::1]/mcp',
  // Decimal, hex, octal and short IPv4 (all 127.0.0.1 once parsed), and 0.
  'https://2130706433/mcp',
  'https://0x7f.1/mcp',
  'https://0177.0.0.1/mcp',
  'https://127.1/mcp',
  'https://0/mcp',
  'https://0.0.0.0/mcp',
  'https://[::]/mcp',
  // Multicast, reserved, broadcast.
  'https://224.0.0.1/mcp',
  'https://239.255.255.250/mcp',
  'https://240.0.0.1/mcp',
  'https://255.255.255.255/mcp',
  'https://[ff02::1]/mcp',
  'https://[ff0e::1]/mcp',
  // Unique-local, deprecated site-local, link-local with the metadata service's v6 address.
  'https://[fd00::1]/mcp',
  'https://[fec0::1]/mcp',
  'https://[fd00:ec2::254]/mcp',
  // Documentation and benchmarking ranges: never a real server, often routed inside.
  'https://192.0.2.1/mcp',
  'https://198.51.100.7/mcp',
  'https://203.0.113.7/mcp',
  'https://198.18.0.1/mcp',
  'https://[2001:db8::1]/mcp',
  'https://[3fff::1]/mcp',
  // IETF protocol assignments: Teredo among them.
  'https://192.0.0.8/mcp',
  'https://[2001::1]/mcp',
];

test('every other spelling of a non-public address is refused before any request', async () => {
  for (const url of NOT_PUBLIC_URLS) {
    const requested: string[] = [];
    const client = new OAuthClient({
      fetch: async (requestUrl) => {
        requested.push(requestUrl);
        return Response.json({ resource: url, authorization_servers: ['https://1.1.1.1'] });
      },
    });
    await refusedAsNotPublic(client.discoverMcpServer(url)).catch((err: unknown) => {
      throw new Error(`${url}: ${String(err)}`);
    });
    assert.deepEqual(requested, [], `${url}: no request`);
  }
});

test('a name that resolves to any such address is refused, and public spellings are let through', async () => {
  for (const address of ['::ffff:10.0.0.1', '64:ff9b::a9fe:a9fe', '2002:c0a8:101::', 'fe80::1%eth0', '224.0.0.251']) {
    const { resolve } = scriptedResolver([PUBLIC_V4, { address, family: address.includes(':') ? 6 : 4 }]);
    const client = new OAuthClient({ resolve, fetch: async () => assert.fail(`${address}: a request was made`) });
    await refusedAsNotPublic(client.discoverMcpServer('https://mcp.example.test/mcp'));
  }
  // The control: public addresses, in the same spellings, reach the (stand-in) request.
  for (const url of [
    'https://1.1.1.1/mcp',
    'https://[2606:4700:4700::1111]/mcp',
    'https://[::ffff:101:101]/mcp',
    'https://[64:ff9b::1.1.1.1]/mcp',
    'https://[2002:101:101::]/mcp',
    'https://16843009/mcp',
  ]) {
    const requested: string[] = [];
    const client = new OAuthClient({
      fetch: async (requestUrl) => {
        requested.push(requestUrl);
        return new Response('no', { status: 404 });
      },
    });
    await assert.rejects(client.discoverMcpServer(url), (err: OAuthFlowError) => err.reason !== 'configuration');
    assert.equal(requested.length, 1, `${url}: requested`);
  }
});

test('a redirect from a discovered URL to a private address is not followed', async () => {
  const requested: { url: string; redirect: RequestRedirect | undefined }[] = [];
  const client = new OAuthClient({
    fetch: async (url, init) => {
      requested.push({ url, redirect: init.redirect });
      return new Response(null, {
        status: 302,
        headers: { location: 'https://169.254.169.254/latest/meta-data/' },
      });
    },
  });
  const err = await client.discoverMcpServer('https://1.1.1.1/mcp').then(
    () => assert.fail('expected a refusal'),
    (error: unknown) => error,
  );
  assert.ok(err instanceof OAuthFlowError);
  assert.equal(err.reason, 'provider_error');
  assert.match(err.message, /HTTP 302/);
  assert.deepEqual(requested, [
    { url: 'https://1.1.1.1/.well-known/oauth-protected-resource/mcp', redirect: 'manual' },
  ]);
});

test('the connection goes to the very address its lookup checked, not to a second resolution', async () => {
  // No public server exists in a test, so the dispatcher is told to allow loopback and refuse the rest:
  // the name below is in no DNS, so an answer proves the socket went to the checked address.
  const served = http.createServer((_request, response) => response.end('inside'));
  await new Promise<void>((resolve) => served.listen(0, '127.0.0.1', resolve));
  const port = (served.address() as net.AddressInfo).port;
  const { resolve, calls } = scriptedResolver([LOOPBACK], [{ address: '10.0.0.1', family: 4 }]);
  const dispatcher = publicOnlyDispatcher(resolve, 10_000, (address) => address === '127.0.0.1');
  try {
    const answer = await undiciFetch(`http://pinned.invalid:${port}/`, { dispatcher });
    assert.equal(await answer.text(), 'inside');
    assert.deepEqual(calls, ['pinned.invalid']);
    // A new connection resolves again, and is refused when the answer is not allowed.
    await dispatcher.close();
    const again = publicOnlyDispatcher(resolve, 10_000, (address) => address === '127.0.0.1');
    const refused = await undiciFetch(`http://pinned.invalid:${port}/`, { dispatcher: again }).then(
      () => assert.fail('expected a refusal'),
      (err: unknown) => err,
    );
    assert.ok(findNotPublicAddress(refused), String(refused));
    await again.close();
  } finally {
    await new Promise<void>((resolve) => served.close(() => resolve()));
  }
});
