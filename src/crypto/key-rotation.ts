/**
 * Key rotation: re-encrypts every sealed value (src/crypto/sealed-columns.ts) with the box's sealing
 * key, in batches of rows, each batch its own transaction. Resumable: a value already sealed with the
 * new key is left alone, so running it again after an interruption continues where it stopped. The key
 * check row records the rotation while it runs (both keys needed) and the new key once it is done.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.ts';
import { completeRotation, markRotation } from '../store/key-check.ts';
import { KEY_CHECK_TEXT } from './key-check.ts';
import { countNotSealedWith, describeColumns, resealBatch, SEALED_COLUMNS } from './sealed-columns.ts';
import { sealedKeyId, type SecretBox } from './secret-box.ts';

export interface RotationOptions {
  /** Rows per transaction. */
  batchSize: number;
  /** Told after each batch (progress output). */
  onBatch?: (progress: { columns: string; rows: number; total: number }) => void;
  /** Stops after the batch in progress (Ctrl-C): the rotation stays marked, to be run again. */
  signal?: AbortSignal;
  /**
   * Passes over every table before giving up. Values sealed with an old key keep appearing only if a
   * process still seals with it; each pass after the first finds only what was written meanwhile.
   */
  maxPasses?: number;
}

export type RotationResult =
  | { status: 'complete'; resealed: number }
  | { status: 'interrupted'; resealed: number }
  | { status: 'incomplete'; resealed: number; remaining: { columns: string; rows: number }[] };

/**
 * `box` must already have passed openSecretBox (src/crypto/key-check.ts): it seals with the new key
 * and opens with the new and the previous one.
 */
export async function rotateKey(
  db: Kysely<Database>,
  box: SecretBox,
  options: RotationOptions,
): Promise<RotationResult> {
  const { batchSize, onBatch, signal, maxPasses = 3 } = options;
  await markRotation(db, box.keyId);
  const reseal = (sealed: string) => (sealedKeyId(sealed) === box.keyId ? sealed : box.seal(box.open(sealed)));
  let resealed = 0;
  for (let pass = 0; pass < maxPasses; pass++) {
    for (const spec of SEALED_COLUMNS) {
      let after: string | null = null;
      let total = 0;
      for (;;) {
        if (signal?.aborted) return { status: 'interrupted', resealed };
        const batch = await resealBatch(db, spec, box.keyId, reseal, after, batchSize);
        if (batch.rows === 0) break;
        after = batch.last;
        total += batch.rows;
        resealed += batch.rows;
        onBatch?.({ columns: describeColumns(spec), rows: batch.rows, total });
      }
    }
    const remaining = (await countNotSealedWith(db, box.keyId)).filter((c) => c.rows > 0);
    if (remaining.length === 0) {
      await completeRotation(db, box.keyId, box.seal(KEY_CHECK_TEXT));
      return { status: 'complete', resealed };
    }
    if (pass === maxPasses - 1) return { status: 'incomplete', resealed, remaining };
  }
  return { status: 'incomplete', resealed, remaining: await countNotSealedWith(db, box.keyId) };
}
