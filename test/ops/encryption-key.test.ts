/**
 * The encryption key (docs/operations.md, "Encryption key"): sealed values name the key that sealed them; a start with a
 * key that is not the database's, or without the key file, refuses with a clear message instead of
 * failing requests later; DATABASE_URL requires SLIPWAY_ENCRYPTION_KEY; and a key rotation re-encrypts
 * every sealed value in batches, can be interrupted and run again, and needs both keys while it runs.
 */
import assert from 'node:assert/strict';
import { createCipheriv, randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sql, type Kysely } from 'kysely';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { databaseHoldsNoSealedValue, openSecretBox } from '../../src/crypto/key-check.ts';
import { rotateKey } from '../../src/crypto/key-rotation.ts';
import { SEALED_COLUMNS } from '../../src/crypto/sealed-columns.ts';
import {
  createSecretBox,
  keyIdOf,
  loadEncryptionKeys,
  sealedKeyId,
  type EncryptionKeys,
  type SecretBox,
} from '../../src/crypto/secret-box.ts';
import type { Database } from '../../src/store/schema.ts';
import { readKeyCheck } from '../../src/store/key-check.ts';
import { bootstrap } from '../../src/bootstrap.ts';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';
import { runToExit } from '../support/service-harness.ts';

const keysOf = (current: Buffer, ...previous: Buffer[]): EncryptionKeys => ({
  current,
  previous,
  source: 'SLIPWAY_ENCRYPTION_KEY',
  file: null,
});

/** A value in the first sealed format (no key id), as versions before the key id wrote it. */
function sealV1(key: Buffer, plaintext: string): string {
  const nonce = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [
    'v1',
    nonce.toString('base64url'),
    cipher.getAuthTag().toString('base64url'),
    body.toString('base64url'),
  ].join('.');
}

describe('sealed values name their key', () => {
  test('a value is sealed with the key id; a box with the new and the previous key opens both', () => {
    const [oldKey, newKey] = [randomBytes(32), randomBytes(32)];
    const old = createSecretBox(oldKey).seal('s3cret');
    assert.equal(sealedKeyId(old), keyIdOf(oldKey));
    assert.notEqual(keyIdOf(oldKey), keyIdOf(newKey));
    const both = createSecretBox(newKey, [oldKey]);
    assert.equal(both.open(old), 's3cret');
    assert.equal(sealedKeyId(both.seal('x')), keyIdOf(newKey), 'seals with the new key');
    assert.equal(both.open(sealV1(oldKey, 'legacy')), 'legacy', 'values of the first format still open');
    assert.throws(
      () => createSecretBox(newKey).open(old),
      new RegExp(`Sealed with key ${keyIdOf(oldKey)}, which this process does not have`),
    );
  });

  test('DATABASE_URL without SLIPWAY_ENCRYPTION_KEY is a configuration error naming it', () => {
    assert.throws(
      () => loadConfig({ DATABASE_URL: 'postgres://slipway@db.internal/slipway' }),
      (error: unknown) => error instanceof ConfigError && error.variable === 'SLIPWAY_ENCRYPTION_KEY',
    );
    const config = loadConfig({
      DATABASE_URL: 'postgres://slipway@db.internal/slipway',
      SLIPWAY_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    });
    assert.equal(config.encryptionKey?.length, 32);
    assert.throws(
      () => loadConfig({ SLIPWAY_PREVIOUS_ENCRYPTION_KEY: 'short' }),
      (error: unknown) => error instanceof ConfigError && error.variable === 'SLIPWAY_PREVIOUS_ENCRYPTION_KEY',
    );
  });

  test('a missing key file is not replaced by a new key when the database holds sealed values', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-keyfile-'));
    try {
      await assert.rejects(
        loadEncryptionKeys({ configured: null, previous: null, dataDir, mayCreate: false }),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError && error.variable === 'SLIPWAY_ENCRYPTION_KEY');
          assert.match(error.message, /encryption\.key is missing.*restore encryption\.key from your backup/);
          return true;
        },
      );
      assert.deepEqual(await fs.readdir(dataDir), [], 'no key file was made');
      const made = await loadEncryptionKeys({ configured: null, previous: null, dataDir, mayCreate: true });
      assert.equal((await fs.stat(path.join(dataDir, 'encryption.key'))).mode & 0o777, 0o600);
      assert.ok(
        (await loadEncryptionKeys({ configured: null, previous: null, dataDir, mayCreate: false })).current.equals(
          made.current,
        ),
      );
    } finally {
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  });
});

interface Seeded {
  /** Every sealed value's plaintext, by where it is. */
  plaintexts: Map<string, string>;
}

/** Rows in every table with sealed columns, sealed with `box` (and one value in the first format). */
async function seed(db: Kysely<Database>, box: SecretBox, legacyKey: Buffer, deployments: number): Promise<Seeded> {
  const { workspaceId, organizationId } = await bootstrap(db, null);
  const plaintexts = new Map<string, string>();
  const sealed = (where: string, plaintext: string, legacy = false) => {
    plaintexts.set(where, plaintext);
    return legacy ? sealV1(legacyKey, plaintext) : box.seal(plaintext);
  };
  for (let i = 0; i < deployments; i++) {
    const deploymentId = randomUUID();
    const revisionId = randomUUID();
    const projectId = randomUUID();
    await db
      .insertInto('tracing_projects')
      .values({ id: projectId, workspace_id: workspaceId, name: `project-${i}` })
      .execute();
    const secrets = [
      { name: 'A', value: sealed(`deployments/${deploymentId}/A`, `a-${i}`) },
      { name: 'B', value: sealed(`deployments/${deploymentId}/B`, `b-${i}`, i === 0) },
    ];
    await sql`insert into deployments (id, workspace_id, name, source, source_config, deployment_type, status, secrets, tracing_project_id)
      values (${deploymentId}, ${workspaceId}, ${`d-${i}`}, 'external_container', '{}', 'dev', 'READY', ${JSON.stringify(secrets)}::jsonb, ${projectId})`.execute(
      db,
    );
    await sql`insert into revisions (id, deployment_id, workspace_id, number, status, source, source_revision_config, snapshot, secrets)
      values (${revisionId}, ${deploymentId}, ${workspaceId}, 1, 'DEPLOYED', 'external_container', '{}', '{}',
        ${JSON.stringify([{ name: 'A', value: sealed(`revisions/${revisionId}/A`, `ra-${i}`) }])}::jsonb)`.execute(db);
    await db
      .insertInto('deployment_runtimes')
      .values({
        deployment_id: deploymentId,
        workspace_id: workspaceId,
        database_name: `db_${i}`,
        role_name: `role_${i}`,
        database_password_sealed: sealed(`runtimes/${deploymentId}/password`, `pw-${i}`),
        agent_credential_sealed: i % 2 === 0 ? null : sealed(`runtimes/${deploymentId}/credential`, `cred-${i}`),
      })
      .execute();
  }
  const providerId = randomUUID();
  await sql`insert into oauth_providers (id, organization_id, provider_id, name, client_id, client_secret_encrypted, auth_url, token_url)
    values (${providerId}, ${organizationId}, 'idp', 'IdP', 'client', ${sealed('provider/secret', 'client-secret')}, 'https://idp.example.com/auth', 'https://idp.example.com/token')`.execute(
    db,
  );
  for (let i = 0; i < 3; i++) {
    const tokenId = randomUUID();
    await sql`insert into oauth_tokens (id, workspace_id, provider_id, access_token_encrypted, refresh_token_encrypted, token_type, issuer, scopes, status, created_by)
      values (${tokenId}, ${workspaceId}, ${providerId}, ${sealed(`tokens/${tokenId}/access`, `at-${i}`)}, ${i === 0 ? null : sealed(`tokens/${tokenId}/refresh`, `rt-${i}`)}, 'Bearer', 'https://idp.example.com', '[]', 'active', 'test')`.execute(
      db,
    );
  }
  await sql`insert into oauth_authorizations (id, workspace_id, provider_id, state_hash, code_verifier_encrypted, redirect_uri, scopes, status, created_by, expires_at)
    values (${randomUUID()}, ${workspaceId}, ${providerId}, ${randomBytes(32)}, ${sealed('authorization/verifier', 'verifier')}, 'https://slipway.example.com/cb', '[]', 'pending', 'test', now() + interval '1 hour')`.execute(
    db,
  );
  await sql`insert into codehost_integrations (id, workspace_id, name, api_url, credentials_encrypted, webhook_secret_encrypted, kind)
    values (${randomUUID()}, ${workspaceId}, 'github', 'https://api.github.com', ${sealed('codehost/credentials', '{"token":"ghp_x"}')}, ${sealed('codehost/webhook', 'hook-secret')}, 'token')`.execute(
    db,
  );
  return { plaintexts };
}

/** Every sealed value in the database. */
async function allSealed(db: Kysely<Database>): Promise<string[]> {
  const values: string[] = [];
  for (const spec of SEALED_COLUMNS) {
    const columns = spec.kind === 'secrets' ? [spec.column] : spec.columns;
    const rows = await sql<
      Record<string, unknown>
    >`select ${sql.join(columns.map((c) => sql.ref(c)))} from ${sql.table(spec.table)}`.execute(db);
    for (const row of rows.rows) {
      for (const c of columns) {
        const value = row[c];
        if (spec.kind === 'secrets') values.push(...(value as { value: string }[]).map((s) => s.value));
        else if (value !== null) values.push(value as string);
      }
    }
  }
  return values;
}

describe('the key check and key rotation, on a database', () => {
  let database: TestDatabase;
  const oldKey = randomBytes(32);
  const newKey = randomBytes(32);
  let seeded: Seeded;

  before(async () => {
    database = await createTestDatabase();
  });
  after(() => database.drop());

  test('every column that holds sealed values is one a rotation re-encrypts', async () => {
    const named = await sql<{
      name: string;
    }>`select table_name || '.' || column_name as name from information_schema.columns
      where table_schema = 'public' and (column_name like '%\\_encrypted' or column_name like '%\\_sealed' or column_name = 'secrets') order by 1`.execute(
      database.db,
    );
    const listed = SEALED_COLUMNS.flatMap((spec) =>
      spec.kind === 'secrets' ? [`${spec.table}.${spec.column}`] : spec.columns.map((c) => `${spec.table}.${c}`),
    ).sort();
    assert.deepEqual(
      named.rows.map((r) => r.name),
      listed,
    );
  });

  test('an earlier database holding sealed values: the key that opens them is recorded, another is refused', async () => {
    seeded = await seed(database.db, createSecretBox(oldKey), oldKey, 5);
    assert.equal(await databaseHoldsNoSealedValue(database.db), false, 'a missing key file must not be replaced now');
    await assert.rejects(openSecretBox(database.db, keysOf(newKey)), /does not open the secrets already stored/);
    assert.equal(await readKeyCheck(database.db), null, 'nothing recorded for a key that does not fit');
    const box = await openSecretBox(database.db, keysOf(oldKey));
    assert.equal((await readKeyCheck(database.db))?.keyId, keyIdOf(oldKey));
    assert.equal(box.keyId, keyIdOf(oldKey));
  });

  test('a start with another key refuses, naming both key ids and what to do', async () => {
    await assert.rejects(
      openSecretBox(database.db, { ...keysOf(newKey), source: '/srv/slipway/encryption.key' }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError && error.variable === 'SLIPWAY_ENCRYPTION_KEY');
        assert.match(
          error.message,
          new RegExp(
            `the key from /srv/slipway/encryption.key \\(id ${keyIdOf(newKey)}\\) is not the key this database's secrets are sealed with \\(id ${keyIdOf(oldKey)}\\)`,
          ),
        );
        assert.match(error.message, /docs\/operations\.md/);
        return true;
      },
    );
    // The new key beside the previous one is how a rotation begins: accepted.
    assert.equal((await openSecretBox(database.db, keysOf(newKey, oldKey))).keyId, keyIdOf(newKey));
  });

  test('a rotation interrupted after a batch is marked, needs both keys, and completes when run again', async () => {
    const box = await openSecretBox(database.db, keysOf(newKey, oldKey));
    const aborter = new AbortController();
    const batches: { columns: string; rows: number }[] = [];
    const first = await rotateKey(database.db, box, {
      batchSize: 2,
      signal: aborter.signal,
      onBatch: (b) => (batches.push(b), aborter.abort()),
    });
    assert.deepEqual({ status: first.status, resealed: first.resealed }, { status: 'interrupted', resealed: 2 });
    assert.deepEqual(batches, [{ columns: 'deployments.secrets', rows: 2, total: 2 }]);
    assert.equal((await readKeyCheck(database.db))?.rotatingTo, keyIdOf(newKey));

    // Mid-rotation, one key is not enough: values under each are stored.
    await assert.rejects(
      openSecretBox(database.db, keysOf(oldKey)),
      /a key rotation to the key with id .* is in progress/,
    );
    await assert.rejects(
      openSecretBox(database.db, keysOf(newKey)),
      /is not the key this database's secrets are sealed with/,
    );

    const second = await rotateKey(database.db, await openSecretBox(database.db, keysOf(newKey, oldKey)), {
      batchSize: 2,
    });
    assert.equal(second.status, 'complete');
    const values = await allSealed(database.db);
    assert.equal(values.length, seeded.plaintexts.size);
    assert.ok(
      values.every((v) => sealedKeyId(v) === keyIdOf(newKey)),
      'every value is sealed with the new key',
    );
    const newOnly = createSecretBox(newKey);
    assert.deepEqual(
      values.map((v) => newOnly.open(v)).sort(),
      [...seeded.plaintexts.values()].sort(),
      'and opens to what it was',
    );
    assert.deepEqual(await readKeyCheck(database.db).then((k) => ({ keyId: k?.keyId, rotatingTo: k?.rotatingTo })), {
      keyId: keyIdOf(newKey),
      rotatingTo: null,
    });

    // Done: the new key alone starts; the old one alone is refused.
    assert.equal((await openSecretBox(database.db, keysOf(newKey))).keyId, keyIdOf(newKey));
    await assert.rejects(
      openSecretBox(database.db, keysOf(oldKey)),
      /is not the key this database's secrets are sealed with/,
    );
  });
});

describe('npm run rotate-key, on DATABASE_URL', () => {
  let database: TestDatabase;
  const oldKey = randomBytes(32).toString('hex');
  const newKey = randomBytes(32).toString('hex');

  before(async () => {
    database = await createTestDatabase();
    const keys = keysOf(Buffer.from(oldKey, 'hex'));
    await openSecretBox(database.db, keys);
    await seed(database.db, createSecretBox(keys.current), keys.current, 3);
  });
  after(() => database.drop());

  test('without the previous key it says which variables to set', async () => {
    const run = await runToExit(
      { DATABASE_URL: database.url, SLIPWAY_ENCRYPTION_KEY: newKey },
      { script: 'scripts/rotate-key.ts' },
    );
    assert.equal(run.code, 2, run.stderr);
    assert.match(
      run.stderr,
      /^rotate-key: SLIPWAY_PREVIOUS_ENCRYPTION_KEY: is not set: set it to the key in use now, and SLIPWAY_ENCRYPTION_KEY to the new key/,
    );
  });

  test('with both keys it re-encrypts everything and records the new key', async () => {
    const run = await runToExit(
      { DATABASE_URL: database.url, SLIPWAY_ENCRYPTION_KEY: newKey, SLIPWAY_PREVIOUS_ENCRYPTION_KEY: oldKey },
      { script: 'scripts/rotate-key.ts', args: ['--batch-size', '2'] },
    );
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    const newId = keyIdOf(Buffer.from(newKey, 'hex'));
    assert.match(
      run.stdout,
      new RegExp(`done: \\d+ rows re-encrypted; every sealed value is sealed with the key with id ${newId}`),
    );
    assert.match(run.stdout, /remove SLIPWAY_PREVIOUS_ENCRYPTION_KEY/);
    assert.ok((await allSealed(database.db)).every((v) => sealedKeyId(v) === newId));
    assert.equal((await readKeyCheck(database.db))?.keyId, newId);
  });
});
