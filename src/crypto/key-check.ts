/**
 * At start, before anything is served: are the process's encryption keys the ones the database's
 * sealed values need? A changed or lost key otherwise goes unnoticed until a request opens a secret
 * and fails. The database remembers its key by id and a value sealed with it (src/store/key-check.ts).
 *
 * The rules: the key the values are sealed with must be among the process's keys; during a rotation
 * (scripts/rotate-key.ts) the key it moves to must be the process's sealing key, since a process still
 * sealing with the old key would undo the rotation.
 */
import type { Kysely } from 'kysely';
import { ConfigError } from '../config.ts';
import type { Database } from '../store/schema.ts';
import { readKeyCheck, recordKeyCheck } from '../store/key-check.ts';
import { firstSealedValue } from './sealed-columns.ts';
import { createSecretBox, keyIdOf, sealedKeyId, type EncryptionKeys, type SecretBox } from './secret-box.ts';

export const KEY_CHECK_TEXT = 'slipway key check';

const ROTATION_DOC = "see 'Encryption key' in docs/operations.md";

/** Whether a new key may be generated: nothing in the database is sealed with any key yet. */
export async function databaseHoldsNoSealedValue(db: Kysely<Database>): Promise<boolean> {
  return (await readKeyCheck(db)) === null && (await firstSealedValue(db)) === null;
}

function describeKeys(keys: EncryptionKeys): string {
  const current = `the key from ${keys.source} (id ${keyIdOf(keys.current)})`;
  if (keys.previous.length === 0) return current;
  return `${current} and the previous key (id ${keys.previous.map(keyIdOf).join(', ')})`;
}

/** The key, among the process's, that opens `sealed`; null when none does. */
function keyOpening(keys: EncryptionKeys, sealed: string): Buffer | null {
  for (const key of [keys.current, ...keys.previous]) {
    const id = sealedKeyId(sealed);
    if (id !== null && id !== keyIdOf(key)) continue;
    try {
      createSecretBox(key).open(sealed);
      return key;
    } catch {
      // Not this one.
    }
  }
  return null;
}

/**
 * Checks the keys against the database (recording the key at the first start) and returns the box to
 * seal and open with. Throws a ConfigError naming SLIPWAY_ENCRYPTION_KEY when they do not fit.
 */
export async function openSecretBox(db: Kysely<Database>, keys: EncryptionKeys): Promise<SecretBox> {
  const box = createSecretBox(keys.current, keys.previous);
  let stored = await readKeyCheck(db);
  if (stored === null) {
    // First start with a key check: a database of an earlier version may hold values already, sealed
    // with whatever key it had. Remember that key, if this process has it.
    const sample = await firstSealedValue(db);
    const key = sample === null ? keys.current : keyOpening(keys, sample.value);
    if (key === null) {
      throw new ConfigError(
        'SLIPWAY_ENCRYPTION_KEY',
        `${describeKeys(keys)} does not open the secrets already stored (${sample!.where}): ` +
          `they were sealed with another key. Set SLIPWAY_ENCRYPTION_KEY to that key (or restore ` +
          `its encryption.key file).`,
      );
    }
    await recordKeyCheck(db, keyIdOf(key), createSecretBox(key).seal(KEY_CHECK_TEXT));
    stored = (await readKeyCheck(db))!;
  }
  const sealedWith = [keys.current, ...keys.previous].find((k) => keyIdOf(k) === stored.keyId);
  let opens = false;
  if (sealedWith) {
    try {
      opens = createSecretBox(sealedWith).open(stored.checkValue) === KEY_CHECK_TEXT;
    } catch {
      opens = false;
    }
  }
  if (!opens) {
    throw new ConfigError(
      'SLIPWAY_ENCRYPTION_KEY',
      `${describeKeys(keys)} is not the key this database's secrets are sealed with (id ` +
        `${stored.keyId}). Start with that key (SLIPWAY_ENCRYPTION_KEY, or the encryption.key ` +
        `file it came from); to change keys, ${ROTATION_DOC}.`,
    );
  }
  if (stored.rotatingTo !== null && stored.rotatingTo !== box.keyId) {
    throw new ConfigError(
      'SLIPWAY_ENCRYPTION_KEY',
      `a key rotation to the key with id ${stored.rotatingTo} is in progress, and ${describeKeys(keys)} ` +
        `seals with another. Set SLIPWAY_ENCRYPTION_KEY to the new key and SLIPWAY_PREVIOUS_ENCRYPTION_KEY ` +
        `to the key with id ${stored.keyId} until the rotation completes; ${ROTATION_DOC}.`,
    );
  }
  return box;
}
