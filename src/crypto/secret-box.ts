/**
 * Encryption at rest for deployment secrets, OAuth client secrets and tokens, code-host credentials:
 * AES-256-GCM with a fresh 96-bit nonce per value. Sealed format: `v2.<key id>.<nonce>.<tag>.<ciphertext>`
 * (base64url parts). The key id names the key that sealed the value, so a key rotation
 * (src/crypto/key-rotation.ts) can tell what is left to re-encrypt, and a box holding the new and the
 * previous key opens both while it runs. Values of the first format, `v1.<nonce>.<tag>.<ciphertext>`,
 * carry no key id: they are opened by trying each key (GCM's tag tells the right one).
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { ConfigError } from '../config.ts';

export interface SecretBox {
  /** Id of the key new values are sealed with. */
  readonly keyId: string;
  /** Ids of every key this box opens, the sealing key first. */
  readonly keyIds: readonly string[];
  seal(plaintext: string): string;
  open(sealed: string): string;
}

/**
 * A short public name for a key: an HMAC of a constant under the key, so it tells keys apart without
 * telling anything about the key. 48 bits: an accidental match of two keys is out of reach.
 */
export function keyIdOf(key: Buffer): string {
  return createHmac('sha256', key).update('slipway key id').digest('hex').slice(0, 12);
}

/** The id of the key that sealed a value; null for a value of the first format (no id) or not sealed. */
export function sealedKeyId(sealed: string): string | null {
  const match = /^v2\.([0-9a-f]{12})\./.exec(sealed);
  return match ? match[1]! : null;
}

function openWith(key: Buffer, nonce: string, tag: string, body: string): string {
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(nonce, 'base64url'));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
}

/** Seals with `key`; opens values sealed with `key` or any of `previous` (during a key rotation). */
export function createSecretBox(key: Buffer, previous: readonly Buffer[] = []): SecretBox {
  for (const k of [key, ...previous]) if (k.length !== 32) throw new Error('The encryption key must be 32 bytes');
  const keyId = keyIdOf(key);
  const keys = new Map<string, Buffer>([[keyId, key], ...previous.map((k) => [keyIdOf(k), k] as const)]);
  return {
    keyId,
    keyIds: [...keys.keys()],
    seal(plaintext) {
      const nonce = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, nonce);
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return [
        'v2',
        keyId,
        nonce.toString('base64url'),
        cipher.getAuthTag().toString('base64url'),
        body.toString('base64url'),
      ].join('.');
    },
    open(sealed) {
      const parts = sealed.split('.');
      if (parts[0] === 'v2' && parts.length === 5) {
        const [, id, nonce, tag, body] = parts as [string, string, string, string, string];
        const k = keys.get(id);
        if (!k)
          throw new Error(
            `Sealed with key ${id}, which this process does not have (it has ${[...keys.keys()].join(', ')})`,
          );
        return openWith(k, nonce, tag, body);
      }
      if (parts[0] === 'v1' && parts.length === 4) {
        const [, nonce, tag, body] = parts as [string, string, string, string];
        let failure: unknown;
        for (const k of keys.values()) {
          try {
            return openWith(k, nonce, tag, body);
          } catch (error) {
            failure = error;
          }
        }
        throw new Error('None of the keys opens this sealed value', { cause: failure });
      }
      throw new Error('Not a sealed value of a known version');
    },
  };
}

/** The keys a process seals and opens with: `current` seals; `previous` only opens (key rotation). */
export interface EncryptionKeys {
  current: Buffer;
  previous: Buffer[];
  /** Where the keys came from, for messages: the variable or the key file. */
  source: string;
  /** The key file, when the keys came from it. */
  file: string | null;
}

export const KEY_FILE = 'encryption.key';

function parseKey(text: string, where: string): Buffer {
  const key = Buffer.from(text.trim(), 'hex');
  if (key.length !== 32 || !/^[0-9a-fA-F]{64}$/.test(text.trim()))
    throw new Error(`${where} does not hold a 32-byte hex key`);
  return key;
}

/**
 * Reads the key file: the current key on its first line, then (during a key rotation) the previous key.
 * Null when there is no file.
 */
export async function readKeyFile(file: string): Promise<Buffer[] | null> {
  const text = await fs.readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return null;
    throw error;
  });
  if (text === null) return null;
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  if (lines.length === 0) throw new Error(`${file} is empty`);
  return lines.map((line, i) => parseKey(line, `${file} (line ${i + 1})`));
}

/** Replaces the key file atomically and durably: a crash leaves the old content or the new, never half. */
export async function writeKeyFile(file: string, keys: readonly Buffer[]): Promise<void> {
  const temp = `${file}.${process.pid}.tmp`;
  const handle = await fs.open(temp, 'w', 0o600);
  try {
    await handle.writeFile(keys.map((k) => k.toString('hex')).join('\n') + '\n');
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.rename(temp, file);
  const dir = await fs.open(path.dirname(file), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

export interface LoadKeysOptions {
  /** SLIPWAY_ENCRYPTION_KEY, when set. */
  configured: Buffer | null;
  /** SLIPWAY_PREVIOUS_ENCRYPTION_KEY, when set. */
  previous: Buffer | null;
  dataDir: string;
  /**
   * Whether a missing key file may be generated. Only on a database that holds no sealed value yet:
   * otherwise a new key would silently replace a lost one and every stored secret would fail later.
   */
  mayCreate: boolean;
}

/**
 * The key from configuration, or else the key file in the data directory, generated on first use
 * (mode 0600). Losing that file makes every stored secret unreadable: docs/operations.md says to back
 * it up with the database.
 */
export async function loadEncryptionKeys(options: LoadKeysOptions): Promise<EncryptionKeys> {
  const { configured, previous, dataDir, mayCreate } = options;
  const extra = previous ? [previous] : [];
  if (configured) return { current: configured, previous: extra, source: 'SLIPWAY_ENCRYPTION_KEY', file: null };
  const file = path.join(dataDir, KEY_FILE);
  const existing = await readKeyFile(file);
  if (existing !== null) {
    const [current, ...older] = existing as [Buffer, ...Buffer[]];
    return { current, previous: [...older, ...extra], source: file, file };
  }
  if (!mayCreate) {
    throw new ConfigError(
      'SLIPWAY_ENCRYPTION_KEY',
      `is not set and ${file} is missing, but the database holds secrets sealed with a ` +
        `key: restore ${KEY_FILE} from your backup (or set SLIPWAY_ENCRYPTION_KEY to the ` +
        `key). No new key was made.`,
    );
  }
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  const key = randomBytes(32);
  // 'wx' fails if another process created the file meanwhile; then that one's key wins.
  try {
    await fs.writeFile(file, `${key.toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
    return { current: key, previous: extra, source: file, file };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return loadEncryptionKeys(options);
    throw error;
  }
}
