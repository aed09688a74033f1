/**
 * Encryption at rest for deployment secrets, OAuth client secrets and tokens, code-host credentials:
 * AES-256-GCM with a fresh 96-bit nonce per value. Sealed format: `v1.<nonce>.<tag>.<ciphertext>`,
 * each part base64url, so a later key rotation can add `v2` beside it.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';

export interface SecretBox {
  seal(plaintext: string): string;
  open(sealed: string): string;
}

export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error('The encryption key must be 32 bytes');
  return {
    seal(plaintext) {
      const nonce = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, nonce);
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return ['v1', nonce.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.');
    },
    open(sealed) {
      const [version, nonce, tag, body] = sealed.split('.');
      if (version !== 'v1' || nonce === undefined || tag === undefined || body === undefined) {
        throw new Error('Not a sealed value of a known version');
      }
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(nonce, 'base64url'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
    },
  };
}

/**
 * The key from configuration, or else the key file in the data directory, generated on first use
 * (mode 0600). Losing that file makes every stored secret unreadable: docs/operations.md says to back
 * it up with the database.
 */
export async function loadEncryptionKey(configured: Buffer | null, dataDir: string): Promise<Buffer> {
  if (configured) return configured;
  const file = path.join(dataDir, 'encryption.key');
  const existing = await fs.readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return null;
    throw error;
  });
  if (existing !== null) {
    const key = Buffer.from(existing.trim(), 'hex');
    if (key.length !== 32) throw new Error(`${file} does not hold a 32-byte hex key`);
    return key;
  }
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  const key = randomBytes(32);
  // 'wx' fails if another process created the file meanwhile; then that one's key wins.
  try {
    await fs.writeFile(file, key.toString('hex'), { mode: 0o600, flag: 'wx' });
    return key;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return loadEncryptionKey(null, dataDir);
    throw error;
  }
}
