/**
 * Prints the service's OpenAPI document (what GET /openapi.json serves) without a database or a port:
 * the app is built on a pool that never connects, since building routes runs no query.
 * `npm run generate:client` feeds it to openapi-typescript to write packages/sdk/src/api-types.ts.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/crypto/secret-box.ts';
import { connect } from '../src/db/database.ts';
import { createLogger } from '../src/logger.ts';

const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-openapi-'));
const config = loadConfig({ SLIPWAY_DATA_DIR: dataDir, LOG_LEVEL: 'silent' });
const { db } = connect('postgres://127.0.0.1:1/unused', 1);
const app = await buildApp({ config, db, secretBox: createSecretBox(randomBytes(32)), logger: createLogger('silent') });
await app.ready();
const document = app.swagger();
await app.close();
await db.destroy();
await fs.rm(dataDir, { recursive: true, force: true });
process.stdout.write(`${JSON.stringify(document, null, 2)}\n`);
