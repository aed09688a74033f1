/** The database storage rule (src/domain/database-storage.ts): read-only over the limit, cut off past the margin. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cutOffMarginBytes, limitBytesOf, nextStorageState } from '../../src/domain/database-storage.ts';
import { databaseStorageOf } from '../../src/domain/resource-maxima.ts';

const MIB = 1024 * 1024;
const limitBytes = limitBytesOf(1);

test('a database over its limit is made read-only; back within it, writable from either state', () => {
  assert.equal(
    nextStorageState({ state: 'writable', stateSizeBytes: null, sizeBytes: limitBytes, limitBytes }),
    'writable',
  );
  assert.equal(
    nextStorageState({ state: 'writable', stateSizeBytes: null, sizeBytes: limitBytes + 1, limitBytes }),
    'read_only',
  );
  for (const state of ['read_only', 'cut_off'] as const)
    assert.equal(
      nextStorageState({ state, stateSizeBytes: limitBytes * 2, sizeBytes: limitBytes, limitBytes }),
      'writable',
    );
});

test('a read-only database is cut off only once it grows by the margin beyond its size when made read-only', () => {
  const margin = cutOffMarginBytes(limitBytes);
  assert.equal(margin, Math.floor(limitBytes / 10));
  assert.equal(cutOffMarginBytes(limitBytesOf(0.05)), 16 * MIB, 'at least 16 MiB');
  // An honest app that overshot between two measures is not cut off for the overshoot.
  const base = limitBytes + 200 * MIB;
  const at = (sizeBytes: number) =>
    nextStorageState({ state: 'read_only', stateSizeBytes: base, sizeBytes, limitBytes });
  assert.equal(at(base + margin), 'read_only');
  assert.equal(at(base + margin + 1), 'cut_off');
  // Cut off stays cut off while over the limit, whatever it holds.
  assert.equal(
    nextStorageState({ state: 'cut_off', stateSizeBytes: base, sizeBytes: limitBytes + 1, limitBytes }),
    'cut_off',
  );
});

test("a deployment's database limit: its db_storage_gi, else the default, never above the maximum (a stored spec is clamped)", () => {
  const defaults = { databaseStorageGi: 1, maxDatabaseStorageGi: 10 };
  assert.equal(databaseStorageOf(null, defaults), 1);
  assert.equal(databaseStorageOf({ db_storage_gi: 4 }, defaults), 4);
  // Stored before the maximum (or under a larger one): held to it.
  assert.equal(databaseStorageOf({ db_storage_gi: 500 }, defaults), 10);
  assert.equal(limitBytesOf(databaseStorageOf({ db_storage_gi: 500 }, defaults)), 10 * 1024 * MIB);
});
