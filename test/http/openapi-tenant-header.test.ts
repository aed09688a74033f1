/**
 * X-Tenant-Id in the served document: every operation that reads the header declares it, and no other
 * does. Which operations read it is found by asking each one: with a usable admin key and a malformed
 * X-Tenant-Id, an operation that reads it answers 422 at `header.x-tenant-id` before anything else
 * (src/http/authenticate.ts), so nothing changes; one that does not read it answers something else.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import { ADMIN_KEY } from '../support/harness.ts';
import { operationsOf, send, startFuzzService, type FuzzService } from './openapi-fixtures.ts';

const UNKNOWN_UUID = '00000000-0000-4000-8000-000000000000';

let service: FuzzService;
before(async () => {
  service = await startFuzzService();
});
after(() => service?.close());

test('every operation that reads X-Tenant-Id declares it in the document, and no other operation does', async () => {
  const wrong: string[] = [];
  let reading = 0;
  for (const { method, template, route, op } of operationsOf(service.doc)) {
    const declared = (op.parameters ?? []).some((p) => p.in === 'header' && p.name.toLowerCase() === 'x-tenant-id');
    const path = template.replace(/\{([^}]+)\}/g, (_, name: string) =>
      encodeURIComponent(service.fixtures.byParameter[name]?.[0] ?? UNKNOWN_UUID),
    );
    const hasBody = !['GET', 'HEAD', 'DELETE'].includes(method);
    const answer = await send(service.base, {
      method,
      // Waiting operations are asked not to wait.
      url: `${path}?wait=0&timeout=0&follow=false`,
      headers: {
        'x-api-key': ADMIN_KEY,
        'x-tenant-id': 'not-a-uuid',
        ...(hasBody ? { 'content-type': 'application/json' } : {}),
      },
      ...(hasBody ? { body: Buffer.from('{}') } : {}),
      about: 'a malformed X-Tenant-Id',
    });
    const text = answer.body.toString('utf8');
    const reads = answer.status === 422 && /"x-tenant-id"/i.test(text) && /"header"/.test(text);
    if (reads) reading += 1;
    if (reads !== declared)
      wrong.push(
        `${route}: ${reads ? 'reads' : 'does not read'} it (${answer.status}) but ${declared ? 'declares' : 'does not declare'} it`,
      );
  }
  assert.deepEqual(wrong, []);
  assert.ok(reading > 50, `${reading} operations read X-Tenant-Id`);
});
