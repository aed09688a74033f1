/**
 * The JSON body parser reads one body one way only: text that is not Unicode (invalid UTF-8 bytes, a
 * lone UTF-16 surrogate written as a \u escape) and objects with a key given twice are refused with a
 * 422 pointing at the field, and nothing is stored. Malformed JSON, prototype keys and the body limit
 * keep their answers.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { firstInvalidUtf8 } from '../../src/http/json-body.ts';
import { client, createTestApp, type Response, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

/** Sends exact bytes (or exact text) as an application/json body. */
async function send(
  method: 'POST' | 'PATCH',
  url: string,
  payload: string | Buffer,
  headers: Record<string, string> = {},
): Promise<Response> {
  const res = await t.app.inject({
    method,
    url,
    payload,
    headers: { 'x-api-key': 'slw_test_admin_key_0123456789abcdef', 'content-type': 'application/json', ...headers },
  });
  return { status: res.statusCode, body: res.body === '' ? undefined : JSON.parse(res.body), headers: res.headers };
}

async function storedCounts(): Promise<string> {
  const { rows } = await t.database.pool.query(
    "select (select count(*) from deployments)::text || '/' || (select count(*) from revisions)::text || '/' || (select count(*) from listeners)::text as n",
  );
  return rows[0].n;
}

function assertRefused(res: Response, type: string, loc: (string | number)[], label: string): void {
  assert.equal(res.status, 422, `${label}: ${res.status} ${JSON.stringify(res.body)?.slice(0, 300)}`);
  assert.equal(res.body.code, 'validation_failed', label);
  const item = res.body.detail.find((i: { loc: unknown[] }) => JSON.stringify(i.loc) === JSON.stringify(loc));
  assert.ok(item, `${label}: an item at ${JSON.stringify(loc)}, got ${JSON.stringify(res.body.detail)}`);
  assert.equal(item.type, type, label);
  assert.equal(typeof item.msg, 'string', label);
}

const head =
  '{"name":"enc-test","source":"internal_container","source_revision_config":{"image_uri":"reg.example.com/agent';

describe('lone UTF-16 surrogates', () => {
  test('are a 422 at the field, not a 500, and nothing is stored', async () => {
    const before = await storedCounts();
    const cases: { label: string; body: string; loc: (string | number)[] }[] = [
      {
        label: 'image_uri with a high surrogate',
        body: `${head}\\ud800:1"}}`,
        loc: ['body', 'source_revision_config', 'image_uri'],
      },
      {
        label: 'image_uri with a low surrogate',
        body: `${head}\\uDC00:1"}}`,
        loc: ['body', 'source_revision_config', 'image_uri'],
      },
      {
        label: 'a pair the wrong way round',
        body: `${head}\\udc00\\ud800"}}`,
        loc: ['body', 'source_revision_config', 'image_uri'],
      },
      {
        label: 'a high surrogate at the end',
        body: `${head}:1\\ud83d"}}`,
        loc: ['body', 'source_revision_config', 'image_uri'],
      },
      {
        label: 'install_command',
        body: '{"name":"enc-src","source":"internal_source","source_config":{"install_command":"npm ci \\ud800"},"source_revision_config":{"source_tarball_path":"uploads/x.tar.gz","framework_config_path":"a.json"}}',
        loc: ['body', 'source_config', 'install_command'],
      },
      {
        label: 'a resource_spec label value',
        body: `${head}:1"},"source_config":{"resource_spec":{"labels":{"team":"a\\udfff"}}}}`,
        loc: ['body', 'source_config', 'resource_spec', 'labels', 'team'],
      },
      {
        label: 'a resource_spec label key',
        body: `${head}:1"},"source_config":{"resource_spec":{"labels":{"te\\ud800am":"a"}}}}`,
        loc: ['body', 'source_config', 'resource_spec', 'labels'],
      },
      {
        label: 'a secret value',
        body: `${head}:1"},"secrets":[{"name":"A","value":"hunter2\\ud800"}]}`,
        loc: ['body', 'secrets', 0, 'value'],
      },
    ];
    for (const c of cases) {
      const res = await send('POST', '/v2/deployments', c.body);
      if (c.loc.length === 4 && c.loc[3] === 'labels') {
        assert.equal(res.status, 422, c.label);
        assert.ok(
          res.body.detail.some(
            (i: { loc: unknown[]; type: string }) =>
              i.type === 'string_unicode' && c.loc.every((p, n) => i.loc[n] === p),
          ),
          `${c.label}: ${JSON.stringify(res.body)}`,
        );
      } else assertRefused(res, 'string_unicode', c.loc, c.label);
      assert.ok(!JSON.stringify(res.body).includes('hunter2'), `${c.label}: no secret echoed`);
    }
    const patch = await send(
      'PATCH',
      '/v2/deployments/00000000-0000-4000-8000-000000000000',
      '{"source_revision_config":{"image_uri":"x\\ud800"}}',
    );
    assertRefused(patch, 'string_unicode', ['body', 'source_revision_config', 'image_uri'], 'PATCH image_uri');
    assert.equal(await storedCounts(), before, 'nothing stored');
  });

  test('a surrogate pair is a character like any other and is stored intact', async () => {
    const res = await send(
      'POST',
      '/v2/deployments',
      `${head}:1"},"source_config":{"resource_spec":{"labels":{"mood":"\\ud83d\\ude00"}}}}`,
    );
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.source_config.resource_spec.labels.mood, '😀');
    assert.equal((await api.delete(`/v2/deployments/${res.body.id}?delete_tracing_project=true`)).status, 204);
  });
});

describe('bytes that are not UTF-8', () => {
  const body = (bad: number[], field: 'image' | 'secret' = 'image') =>
    field === 'image'
      ? Buffer.concat([Buffer.from(`${head}-`), Buffer.from(bad), Buffer.from(':1"}}')])
      : Buffer.concat([
          Buffer.from(`${head}:1"},"secrets":[{"name":"A","value":"hunter2-`),
          Buffer.from(bad),
          Buffer.from('"}]}'),
        ]);

  test('are a 422, never stored with U+FFFD in their place', async () => {
    const before = await storedCounts();
    const cases: { label: string; bytes: number[] }[] = [
      { label: 'a stray continuation byte', bytes: [0x80] },
      { label: 'an invalid byte', bytes: [0xff] },
      { label: 'an overlong encoding of /', bytes: [0xc0, 0xaf] },
      { label: 'an encoded surrogate', bytes: [0xed, 0xa0, 0x80] },
      { label: 'a truncated sequence', bytes: [0xe2, 0x82] },
      { label: 'beyond U+10FFFF', bytes: [0xf4, 0x90, 0x80, 0x80] },
      { label: 'Latin-1 text', bytes: [0xe9] },
    ];
    for (const c of cases) {
      assertRefused(
        await send('POST', '/v2/deployments', body(c.bytes)),
        'string_unicode',
        ['body', 'source_revision_config', 'image_uri'],
        `image_uri: ${c.label}`,
      );
      const secret = await send('POST', '/v2/deployments', body(c.bytes, 'secret'));
      assertRefused(secret, 'string_unicode', ['body', 'secrets', 0, 'value'], `secret: ${c.label}`);
      assert.ok(!JSON.stringify(secret.body).includes('hunter2'), `${c.label}: no secret echoed`);
    }
    // Outside any string, and at the very end of the body.
    assertRefused(
      await send(
        'POST',
        '/v2/deployments',
        Buffer.concat([Buffer.from('{"name":"x",'), Buffer.from([0xff]), Buffer.from('"source":"y"}')]),
      ),
      'string_unicode',
      ['body'],
      'between fields',
    );
    assertRefused(
      await send('POST', '/v2/deployments', Buffer.concat([Buffer.from('{"name":"x"}'), Buffer.from([0xc3])])),
      'string_unicode',
      ['body'],
      'at the end',
    );
    assert.equal(await storedCounts(), before, 'nothing stored');
    const { rows } = await t.database.pool.query(
      "select count(*)::int as n from revisions where source_revision_config::text like '%' || chr(65533) || '%'",
    );
    assert.equal(rows[0].n, 0, 'no replacement character stored');
  });

  test('valid multi-byte UTF-8 (and a leading byte order mark) is read as it was sent', async () => {
    const res = await send(
      'POST',
      '/v2/deployments',
      Buffer.concat([
        Buffer.from([0xef, 0xbb, 0xbf]),
        Buffer.from(`${head}:1"},"source_config":{"resource_spec":{"labels":{"who":"ünïcødé 😀 €"}}}}`),
      ]),
    );
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.source_config.resource_spec.labels.who, 'ünïcødé 😀 €');
    assert.equal((await api.delete(`/v2/deployments/${res.body.id}?delete_tracing_project=true`)).status, 204);
  });
});

describe('duplicate keys', () => {
  test('are refused with a 422 at the repeated key, wherever the object is, and nothing is stored', async () => {
    const before = await storedCounts();
    const cases: { label: string; body: string; loc: (string | number)[] }[] = [
      {
        label: 'at the top',
        body: '{"name":"dup-a","name":"dup-b","source":"internal_container","source_revision_config":{"image_uri":"r.example.com/a:1"}}',
        loc: ['body', 'name'],
      },
      {
        label: 'nested',
        body: `${head}:1","image_uri":"evil.example.com/b:1"}}`,
        loc: ['body', 'source_revision_config', 'image_uri'],
      },
      {
        label: 'written with an escape',
        body: '{"name":"dup-a","n\\u0061me":"dup-b","source":"internal_container","source_revision_config":{"image_uri":"r.example.com/a:1"}}',
        loc: ['body', 'name'],
      },
      {
        label: 'in a list item',
        body: `${head}:1"},"secrets":[{"name":"A","value":"1"},{"name":"B","value":"2","value":"3"}]}`,
        loc: ['body', 'secrets', 1, 'value'],
      },
      { label: 'an unknown field given twice', body: `${head}:1"},"extra":1,"extra":2}`, loc: ['body', 'extra'] },
      {
        label: 'in a free-form map',
        body: `${head}:1"},"source_config":{"resource_spec":{"labels":{"team":"a","team":"b"}}}}`,
        loc: ['body', 'source_config', 'resource_spec', 'labels', 'team'],
      },
    ];
    for (const c of cases)
      assertRefused(await send('POST', '/v2/deployments', c.body), 'json_duplicate_key', c.loc, c.label);
    // Every JSON endpoint reads bodies the same way.
    assertRefused(
      await send('POST', '/v2/listeners', '{"compute_type":"k8s","compute_id":"a","compute_id":"b"}'),
      'json_duplicate_key',
      ['body', 'compute_id'],
      'listeners',
    );
    assert.equal(await storedCounts(), before, 'nothing stored');
  });

  test('the same key in different objects is not a duplicate', async () => {
    const res = await send(
      'POST',
      '/v2/deployments',
      `{"name":"twin-keys","source":"internal_container","source_revision_config":{"image_uri":"r.example.com/a:1"},"secrets":[{"name":"A","value":"1"},{"name":"B","value":"2"}]}`,
    );
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal((await api.delete(`/v2/deployments/${res.body.id}?delete_tracing_project=true`)).status, 204);
  });
});

describe('what the parser kept', () => {
  test('malformed JSON is a 422 json_invalid that does not quote the body', async () => {
    for (const body of [
      '{"secrets":[{"name":"A","value":"hunter2"}] junk',
      '{"name": "hunter2", ',
      '[1,2',
      '{"a":1}}',
    ]) {
      const res = await send('POST', '/v2/deployments', body);
      assertRefused(res, 'json_invalid', ['body'], body);
      assert.ok(!JSON.stringify(res.body).includes('hunter2'), `${body}: the body is not quoted back`);
    }
    assertRefused(await send('POST', '/v2/deployments', ''), 'json_invalid', ['body'], 'an empty body');
  });

  test('prototype keys are refused as before', async () => {
    for (const body of [
      '{"__proto__":{"admin":true},"name":"x"}',
      '{"name":"x","source_config":{"\\u005f_proto__":{}}}',
      '{"constructor":{"prototype":{"admin":true}}}',
    ]) {
      const res = await send('POST', '/v2/deployments', body);
      assert.equal(res.status, 422, body);
      assert.equal(res.body.code, 'validation_failed', body);
    }
  });

  test('the body limit still answers 413', async () => {
    const res = await send('POST', '/v2/deployments', JSON.stringify({ name: 'x', padding: 'x'.repeat(1_100_000) }));
    assert.equal(res.status, 413);
    assert.equal(res.body.code, 'payload_too_large');
  });
});

describe('the UTF-8 check', () => {
  test('finds the first bad byte exactly where the strict decoder stops', () => {
    // A seeded generator over byte strings rich in lead and continuation bytes.
    let seed = 20261124;
    const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const interesting = [
      0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef,
      0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff,
    ];
    const strict = new TextDecoder('utf-8', { fatal: true });
    for (let n = 0; n < 20_000; n++) {
      const bytes = Uint8Array.from(
        { length: 1 + Math.floor(random() * 8) },
        () => interesting[Math.floor(random() * interesting.length)]!,
      );
      let valid = true;
      try {
        strict.decode(bytes);
      } catch {
        valid = false;
      }
      const at = firstInvalidUtf8(bytes);
      assert.equal(at === -1, valid, `${Buffer.from(bytes).toString('hex')}: ${at}`);
      if (at >= 0) {
        assert.doesNotThrow(() => strict.decode(bytes.subarray(0, at)), 'the bytes before it are UTF-8');
        assert.throws(
          () => strict.decode(bytes.subarray(0, Math.min(bytes.length, at + 4))),
          'the sequence starting there is not',
        );
      }
    }
  });
});
