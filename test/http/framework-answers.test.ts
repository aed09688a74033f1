/**
 * Answers that Node or Fastify give before any route runs still have the error envelope
 * (`{"detail", "code"}`) and an X-Request-Id: requests the HTTP parser rejects, a missing Host, an
 * Expect the service does not meet. Path parameters as long as the schemas allow reach their route.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { Duplex } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { ErrorCode } from '../../src/errors.ts';
import { ERROR_RESPONSES as ERROR_CODES } from '../../src/http/error-statuses.ts';
import { clientErrorHandler } from '../../src/http/framework-answers.ts';
import { ADMIN_KEY, client, createTestApp, type TestApp, listen } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let port: number;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  await listen(t.app);
  port = (t.app.server.address() as net.AddressInfo).port;
});
after(() => t.close());

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

function parse(raw: string): RawAnswer {
  const end = raw.indexOf('\r\n\r\n');
  assert.ok(end > 0, `a complete HTTP answer: ${JSON.stringify(raw.slice(0, 200))}`);
  const [statusLine, ...lines] = raw.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = raw.slice(end + 4);
  if (headers['transfer-encoding'] === 'chunked') {
    let out = '';
    for (let at = 0; ;) {
      const lineEnd = body.indexOf('\r\n', at);
      const size = parseInt(body.slice(at, lineEnd), 16);
      if (!size) break;
      out += body.slice(lineEnd + 2, lineEnd + 2 + size);
      at = lineEnd + 2 + size + 2;
    }
    body = out;
  }
  return { status: Number(statusLine!.split(' ')[1]), headers, body };
}

/** Writes bytes on a fresh connection and reads until the server closes it or a full answer is in. */
function raw(request: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    let data = '';
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      try {
        resolve(parse(data));
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    };
    const timer = setTimeout(done, 5000);
    socket.on('data', (chunk) => {
      data += chunk.toString('latin1');
      const end = data.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: *(\d+)/i.exec(data.slice(0, end));
      if (end > 0 && length && data.length >= end + 4 + Number(length[1])) done();
      if (end > 0 && /\r\ntransfer-encoding: *chunked/i.test(data.slice(0, end)) && data.endsWith('0\r\n\r\n')) done();
    });
    socket.on('end', done);
    socket.on('error', done);
  });
}

function assertEnvelope(answer: RawAnswer, status: number, code: ErrorCode, label: string): void {
  assert.equal(answer.status, status, `${label}: ${answer.status} ${answer.body}`);
  assert.equal(ERROR_CODES[code].status, status, `${label}: ${code} is registered for ${status}`);
  assert.match(answer.headers['content-type'] ?? '', /^application\/json/, `${label}: JSON`);
  const body = JSON.parse(answer.body);
  assert.equal(body.code, code, `${label}: ${answer.body}`);
  assert.equal(typeof body.detail, 'string', label);
  assert.ok((answer.headers['x-request-id'] ?? '').length > 0, `${label}: has X-Request-Id`);
}

describe('requests the HTTP parser rejects', () => {
  test('get the error envelope and a request id', async () => {
    const cases: { label: string; request: string; status: number; code: ErrorCode }[] = [
      {
        label: 'a Content-Length that is not a number',
        request:
          'POST /v2/deployments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}',
        status: 400,
        code: 'malformed_request',
      },
      {
        label: 'Content-Length with Transfer-Encoding',
        request:
          'POST /v2/deployments HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
        status: 400,
        code: 'malformed_request',
      },
      {
        label: 'two different Content-Lengths',
        request: 'POST /v2/deployments HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
        status: 400,
        code: 'malformed_request',
      },
      {
        label: 'a malformed chunk',
        request:
          'POST /v2/deployments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n',
        status: 400,
        code: 'malformed_request',
      },
      { label: 'not HTTP at all', request: 'HELLO\r\n\r\n', status: 400, code: 'malformed_request' },
      {
        label: 'a header line without a colon',
        request: 'GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n',
        status: 400,
        code: 'malformed_request',
      },
      {
        label: 'an invalid character in a header value',
        request: 'GET /v2/deployments HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\x01b\r\n\r\n',
        status: 400,
        code: 'malformed_request',
      },
      {
        label: 'headers over the size limit',
        request: `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
        status: 431,
        code: 'header_too_large',
      },
      {
        label: 'a request line over the size limit',
        request: `GET /healthz?${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
        status: 431,
        code: 'header_too_large',
      },
    ];
    for (const c of cases) {
      const answer = await raw(c.request);
      assertEnvelope(answer, c.status, c.code, c.label);
      assert.equal(answer.headers.connection, 'close', `${c.label}: the connection is closed`);
    }
  });

  test('an HTTP/1.1 request without Host is refused in the envelope', async () => {
    assertEnvelope(
      await raw('GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n'),
      400,
      'malformed_request',
      'no Host',
    );
    // HTTP/1.0 has no Host requirement.
    assert.equal((await raw('GET /healthz HTTP/1.0\r\n\r\n')).status, 200);
  });

  test('an Expect the service cannot meet is a 417 in the envelope', async () => {
    assertEnvelope(
      await raw('GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n'),
      417,
      'expectation_failed',
      'Expect',
    );
    // 100-continue is met as before.
    const continued = await raw(
      'POST /v2/deployments HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}',
    );
    assert.equal(continued.status, 100);
  });

  test('a request that times out is a 408 in the envelope', () => {
    let written = '';
    const socket = new Duplex({
      read() {},
      write(chunk, _encoding, callback) {
        written += String(chunk);
        callback();
      },
    });
    clientErrorHandler(Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), socket);
    assertEnvelope(parse(written), 408, 'request_timeout', 'timeout');
    assert.ok(socket.destroyed, 'the connection is closed');
  });

  test('the answer to a rejected request does not quote it (headers may hold an API key)', async () => {
    const answer = await raw(
      `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Api-Key: slw_secretkey_quoted\r\nContent-Length: abc\r\n\r\n`,
    );
    assert.equal(answer.status, 400);
    assert.ok(!answer.body.includes('slw_secretkey_quoted'));
  });
});

describe('methods a path does not take', () => {
  test('are 405 method_not_allowed with an Allow header naming the methods the path takes', async () => {
    const cases: [method: 'TRACE' | 'OPTIONS' | 'DELETE' | 'GET' | 'PUT', url: string, allow: string][] = [
      ['TRACE', '/metrics', 'GET, HEAD'],
      ['TRACE', '/healthz', 'GET, HEAD'],
      ['OPTIONS', '/readyz', 'GET, HEAD'],
      ['DELETE', '/healthz', 'GET, HEAD'],
      // A GET reaches the dashboard's catch-all first, which yields to the API.
      ['GET', '/v2/auth/authenticate', 'POST'],
      ['PUT', '/v2/deployments', 'GET, HEAD, POST'],
      ['TRACE', '/v2/deployments/00000000-0000-4000-8000-000000000000', 'DELETE, GET, HEAD, PATCH'],
    ];
    for (const [method, url, allow] of cases) {
      const res = await api.call(method, url);
      assert.equal(res.status, 405, `${method} ${url}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.code, 'method_not_allowed', `${method} ${url}`);
      assert.equal(typeof res.body.detail, 'string');
      assert.equal(res.headers.allow, allow, `${method} ${url}`);
      assert.ok(res.headers['x-request-id'], `${method} ${url}: has X-Request-Id`);
    }
  });

  test('a path that does not exist is still 404 route_not_found, whatever the method', async () => {
    for (const method of ['GET', 'TRACE', 'POST', 'DELETE'] as const) {
      const res = await api.call(method, '/v2/no-such-thing');
      assert.equal(res.status, 404, method);
      assert.equal(res.body.code, 'route_not_found', method);
      assert.equal(res.headers.allow, undefined, method);
    }
    // The dashboard's catch-all takes GET on every path: that says nothing about a path it declines.
    const res = await api.call('DELETE', '/no-such-page');
    assert.equal(res.status, 404);
    assert.equal(res.body.code, 'route_not_found');
  });
});

describe('long path parameters', () => {
  test('an agent id of the documented 256 characters is routed, encoded or not', async () => {
    for (const agentId of ['a'.repeat(256), '€'.repeat(256), '😀'.repeat(256), `${'a'.repeat(250)}/ü😀`]) {
      const encoded = encodeURIComponent(agentId);
      const list = await api.get(`/v2/auth/agents/${encoded}/connections`);
      assert.equal(list.status, 200, `${encoded.length} characters: ${JSON.stringify(list.body)}`);
      assert.deepEqual(list.body, { data: [] });
      const removed = await api.delete(`/v2/auth/agents/${encoded}/connections/00000000-0000-4000-8000-000000000000`);
      assert.equal(removed.status, 404);
      assert.equal(removed.body.code, 'not_found', 'the route answered, not the router');
    }
    const tooLong = await api.get(`/v2/auth/agents/${'a'.repeat(257)}/connections`);
    assert.equal(tooLong.status, 422);
    assert.deepEqual(tooLong.body.detail[0].loc, ['path', 'agent_id']);
  });

  test('every path parameter of the documented maximum length reaches its route', async () => {
    const doc = (await api.get('/openapi.json')).body as {
      paths: Record<
        string,
        Record<string, { parameters?: { in: string; name: string; schema?: { maxLength?: number } }[] }>
      >;
    };
    let checked = 0;
    for (const [template, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        const params = (operation.parameters ?? []).filter((p) => p.in === 'path');
        if (!params.some((p) => p.schema?.maxLength !== undefined)) continue;
        // The worst case for the router: every character percent-encoded as four UTF-8 bytes.
        const url = template.replace(/\{([^}]+)\}/g, (_, name: string) => {
          const max = params.find((p) => p.name === name)?.schema?.maxLength;
          return max === undefined ? '00000000-0000-4000-8000-000000000000' : encodeURIComponent('😀'.repeat(max));
        });
        const withBody = method !== 'get' && method !== 'delete';
        const res = await t.app.inject({
          method: method.toUpperCase() as 'GET',
          url,
          headers: { 'x-api-key': ADMIN_KEY, ...(withBody ? { 'content-type': 'application/json' } : {}) },
          ...(withBody ? { payload: '{}' } : {}),
        });
        // Some routes answer HTML (the OAuth callback page); errors are JSON.
        const body = /^application\/json/.test(String(res.headers['content-type'])) ? JSON.parse(res.body) : undefined;
        assert.notEqual(body?.code, 'route_not_found', `${method.toUpperCase()} ${template}: routed`);
        const tooLong =
          res.statusCode === 422 &&
          body.detail.some((i: { loc: unknown[] }) => i.loc.length === 1 && i.loc[0] === 'path');
        assert.ok(!tooLong, `${method.toUpperCase()} ${template}: not refused by the router as too long`);
        checked++;
      }
    }
    assert.ok(checked >= 3, `checked ${checked} operations`);
  });
});
