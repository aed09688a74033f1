/**
 * The encryption key of the embedded setup as an operator meets it (docs/operations.md, "Encryption key"): a changed or a
 * lost `encryption.key` stops the start with a message saying so (no new key is made over a lost
 * one), and `npm run rotate-key` re-encrypts the stored secrets with a new key it makes itself, once
 * the service is stopped; the service then starts on the new key with its secrets intact.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, describe } from 'node:test';
import { createSecretBox, keyIdOf, sealedKeyId } from '../../src/crypto/secret-box.ts';
import { withClient } from '../../src/db/admin-client.ts';
import { call, cleanUp, makeDataDir, runToExit, startService, stop, type Service } from '../support/service-harness.ts';
import { test } from '../support/limited-test.ts';

const KEY = 'slw_ops_encryption_key_0123456789';

after(cleanUp);

/** The deployment secrets as stored, read straight from the running service's embedded database. */
async function storedSecrets(dataDir: string): Promise<string[]> {
  const [pid, , , port] = (await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n');
  assert.ok(pid);
  const password = (await fs.readFile(path.join(dataDir, 'postgres-password'), 'utf8')).trim();
  const rows = await withClient(`postgres://postgres:${password}@127.0.0.1:${port}/slipway`, (c) =>
    c.query<{ value: string }>("select s->>'value' as value from deployments, jsonb_array_elements(secrets) s"),
  );
  return rows.rows.map((r) => r.value);
}

describe('the key file of the embedded setup', { timeout: 300_000 }, () => {
  let dataDir: string;
  let keyFile: string;
  let original: string;
  let deploymentId: string;

  test('first start: a secret is stored, sealed with the key of encryption.key', async () => {
    dataDir = await makeDataDir();
    keyFile = path.join(dataDir, 'encryption.key');
    const service = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY });
    const listener = await call(service, 'POST', '/v2/listeners', KEY, {
      compute_type: 'k8s',
      compute_id: 'eu',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    const deployment = await call(service, 'POST', '/v2/deployments', KEY, {
      name: 'sealed',
      source: 'external_container',
      source_config: { listener_id: listener.body.id },
      source_revision_config: { image_uri: 'registry.example.com/sealed:1' },
      secrets: [{ name: 'TOKEN', value: 'kept-through-rotation' }],
    });
    assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
    deploymentId = deployment.body.id;
    original = (await fs.readFile(keyFile, 'utf8')).trim();
    const [stored] = await storedSecrets(dataDir);
    assert.equal(sealedKeyId(stored!), keyIdOf(Buffer.from(original, 'hex')));
    assert.deepEqual(await stop(service), { code: 0, signal: null });
  });

  test('another key in encryption.key: the start refuses, naming the file and both key ids', async () => {
    const other = randomBytes(32);
    await fs.writeFile(keyFile, other.toString('hex'));
    const refused = await runToExit({ SLIPWAY_DATA_DIR: dataDir, SLIPWAY_BOOTSTRAP_API_KEY: KEY });
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(
      refused.stderr.trim(),
      `slipway: cannot start: SLIPWAY_ENCRYPTION_KEY: the key from ${keyFile} (id ${keyIdOf(other)}) is not the key this database's secrets are sealed with (id ${keyIdOf(Buffer.from(original, 'hex'))}). Start with that key (SLIPWAY_ENCRYPTION_KEY, or the encryption.key file it came from); to change keys, see 'Encryption key' in docs/operations.md.`,
    );
  });

  test('encryption.key missing: the start refuses and makes no new key', async () => {
    await fs.rm(keyFile);
    const refused = await runToExit({ SLIPWAY_DATA_DIR: dataDir, SLIPWAY_BOOTSTRAP_API_KEY: KEY });
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(
        `^slipway: cannot start: SLIPWAY_ENCRYPTION_KEY: is not set and ${keyFile} is missing, .*restore encryption.key from your backup`,
      ),
    );
    await assert.rejects(fs.access(keyFile), 'no key was made over the lost one');
  });

  test('rotate-key refuses while the service runs, then re-encrypts with a new key once it is stopped', async () => {
    await fs.writeFile(keyFile, original, { mode: 0o600 });
    const service: Service = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY });
    const busy = await runToExit({ SLIPWAY_DATA_DIR: dataDir }, { script: 'scripts/rotate-key.ts' });
    assert.equal(busy.code, 2, busy.stderr);
    assert.match(
      busy.stderr,
      new RegExp(
        `^rotate-key: SLIPWAY_DATA_DIR: .* is in use by another Slipway process \\(pid ${service.child.pid}, service,`,
      ),
    );
    assert.deepEqual(await stop(service), { code: 0, signal: null });

    const rotated = await runToExit({ SLIPWAY_DATA_DIR: dataDir }, { script: 'scripts/rotate-key.ts' });
    assert.equal(rotated.code, 0, `${rotated.stdout}\n${rotated.stderr}`);
    const lines = (await fs.readFile(keyFile, 'utf8')).trim().split('\n');
    assert.equal(lines.length, 1, 'the key file holds the new key alone once done');
    const fresh = Buffer.from(lines[0]!, 'hex');
    assert.notEqual(lines[0], original);
    assert.match(
      rotated.stdout,
      new RegExp(`done: \\d+ rows re-encrypted; every sealed value is sealed with the key with id ${keyIdOf(fresh)}`),
    );

    const again = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY });
    const stored = await storedSecrets(dataDir);
    assert.deepEqual(
      stored.map((v) => createSecretBox(fresh).open(v)),
      ['kept-through-rotation'],
      'the secret is intact, under the new key',
    );
    // The service opens it too: a patch that keeps it (the mask) merges it from the stored value.
    const patched = await call(again, 'PATCH', `/v2/deployments/${deploymentId}`, KEY, {
      secrets: [
        { name: 'TOKEN', value: '********' },
        { name: 'OTHER', value: 'added' },
      ],
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.deepEqual((await storedSecrets(dataDir)).map((v) => createSecretBox(fresh).open(v)).sort(), [
      'added',
      'kept-through-rotation',
    ]);
    assert.deepEqual(await stop(again), { code: 0, signal: null }, again.stderr());
  });
});
