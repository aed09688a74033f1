/**
 * A database that cannot be reached is a 503 `unavailable` with Retry-After on every API route (what
 * /readyz says), never a 500.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { buildApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { createSecretBox } from '../../src/crypto/secret-box.ts';
import { connect } from '../../src/db/database.ts';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { createLogger } from '../../src/logger.ts';
import { ADMIN_KEY } from '../support/harness.ts';

test('API routes answer 503 with Retry-After while the database is unreachable; /healthz stays 200', async () => {
  // Nothing listens on this port: every query fails to connect.
  const { db } = connect(`postgres://postgres@127.0.0.1:${await freePort()}/nowhere`, 2);
  const config = loadConfig({
    SLIPWAY_DATA_DIR: '/tmp/slipway-outage',
    SLIPWAY_BOOTSTRAP_API_KEY: ADMIN_KEY,
    LOG_LEVEL: 'silent',
  });
  const app = await buildApp({
    config,
    db,
    secretBox: createSecretBox(randomBytes(32)),
    logger: createLogger('silent'),
  });
  try {
    for (const [method, url] of [
      ['GET', '/v2/deployments'],
      ['POST', '/v2/listeners'],
      ['GET', '/v2/listeners'],
    ] as const) {
      const response = await app.inject({
        method,
        url,
        headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
        ...(method === 'POST' ? { payload: '{"compute_type":"k8s","compute_id":"x"}' } : {}),
      });
      assert.equal(response.statusCode, 503, `${method} ${url}: ${response.body}`);
      assert.equal(response.headers['retry-after'], '5');
      assert.equal(JSON.parse(response.body).code, 'unavailable');
    }
    assert.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 503);
    assert.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
  } finally {
    await app.close();
    await db.destroy();
  }
});
