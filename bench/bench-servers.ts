/**
 * The two HTTP servers under load, both in the bench's own process (the load comes from a child):
 * - the service: `buildApp` exactly as main.ts builds it, on the pool `connect()` makes, with a Kysely
 *   log hook that can record the statements of one request;
 * - the bare baseline: a Fastify app with default options whose one route answers with the bytes the
 *   service answered for a scenario, from memory.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createSecretBox, type SecretBox } from '../src/crypto/secret-box.ts';
import { connect } from '../src/db/database.ts';
import type { Database } from '../src/store/schema.ts';
import type { CapturedStatement } from './load-protocol.ts';
import { preparingPool } from './prepared-statements.ts';

export interface ServiceUnderTest {
  origin: string;
  db: Kysely<Database>;
  pool: pg.Pool;
  secretBox: SecretBox;
  /** Records every statement sent until the returned function is called, which returns them. */
  capture(): () => CapturedStatement[];
  close(): Promise<void>;
}

export async function startService(
  databaseUrl: string,
  logLevel: string,
  preparedStatements: boolean,
): Promise<ServiceUnderTest> {
  // The same pool as production (src/db/database.ts); only the Kysely on it differs, by its log hook
  // (and, in the --prepared-statements experiment, by naming every statement).
  const { pool } = connect(databaseUrl);
  let recording: CapturedStatement[] | null = null;
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: preparedStatements ? preparingPool(pool) : pool }),
    log(event) {
      if (recording !== null && event.level === 'query')
        recording.push({ sql: event.query.sql, parameters: [...event.query.parameters] });
    },
  });
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-data-'));
  const config = loadConfig({ SLIPWAY_DATA_DIR: dataDir, LOG_LEVEL: logLevel, HOST: '127.0.0.1', PORT: '0' });
  // As main.ts configures it, written to /dev/null: the cost of logging is measured, not a terminal's.
  const logger = pino(
    {
      level: config.logLevel,
      redact: {
        paths: ['req.headers["x-api-key"]', 'req.headers.authorization', 'req.headers.cookie'],
        censor: '[redacted]',
      },
    },
    pino.destination({ dest: '/dev/null', sync: true }),
  );
  const secretBox = createSecretBox(randomBytes(32));
  const app = await buildApp({ config, db, secretBox, logger });
  const origin = await app.listen({ host: config.host, port: config.port });
  return {
    origin,
    db,
    pool,
    secretBox,
    capture() {
      const statements: CapturedStatement[] = [];
      recording = statements;
      return () => {
        recording = null;
        return statements;
      };
    },
    async close() {
      await app.close();
      await db.destroy();
      await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface BareResponse {
  status: number;
  body: Buffer;
}

export interface BareServer {
  origin: string;
  responses: Map<string, BareResponse>;
  close(): Promise<void>;
}

export async function startBareServer(): Promise<BareServer> {
  const responses = new Map<string, BareResponse>();
  const app: FastifyInstance = Fastify();
  app.route<{ Params: { key: string } }>({
    method: ['GET', 'POST', 'PATCH'],
    url: '/bare/:key',
    handler(request, reply) {
      const response = responses.get(request.params.key);
      if (!response) return reply.code(404).send();
      return reply.code(response.status).header('content-type', 'application/json; charset=utf-8').send(response.body);
    },
  });
  const origin = await app.listen({ host: '127.0.0.1', port: 0 });
  return { origin, responses, close: () => app.close() };
}
