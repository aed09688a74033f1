/** The operator's maxima (src/config-limits.ts): sized from the host by default, validated, named when wrong. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';

const GIB = 1024 ** 3;
const host = { memoryBytes: 24 * GIB, cpus: 2, pidMax: 32_768 };
const load = (env: Record<string, string> = {}, machine = host) =>
  loadConfig({ SLIPWAY_DATA_DIR: '/tmp/slipway-config-test', ...env }, '/', machine);

test('defaults from the host: apps get its memory less a quarter, an instance half of that, its CPUs, half the task ids', () => {
  assert.deepEqual(
    { ...load().limits },
    {
      appsMemoryMb: 18 * 1024,
      instanceMemoryMb: 9 * 1024,
      instanceCpu: 2,
      instances: 10,
      buildMemoryMb: 9 * 1024,
      buildCpu: 2,
      appsPids: 16_384,
      databaseStorageGi: 10,
      defaultDatabaseStorageGi: 1,
    },
  );
  assert.deepEqual(load().defaultLimits.maximum, {
    instance: { memoryBytes: 9 * GIB, cpu: 2 },
    build: { memoryBytes: 9 * GIB, cpu: 2 },
    instances: 10,
  });
});

test('a small host still fits a default instance, and keeps 1 GiB for the service and PostgreSQL', () => {
  const small = load({}, { memoryBytes: 2 * GIB, cpus: 1, pidMax: 4096 }).limits;
  assert.equal(small.appsMemoryMb, 1024);
  assert.equal(small.instanceMemoryMb, 1024);
  assert.equal(small.instanceCpu, 1);
  assert.equal(small.appsPids, 2048);
});

test('settings override the defaults; a maximum below the default it bounds fails the start, naming it', () => {
  const set = load({ SLIPWAY_MAX_INSTANCE_MEMORY_MB: '2048', SLIPWAY_MAX_INSTANCES: '3', SLIPWAY_APPS_PIDS: '4000' });
  assert.equal(set.limits.instanceMemoryMb, 2048);
  assert.equal(set.limits.instances, 3);
  assert.equal(set.limits.appsPids, 4000);
  assert.throws(
    () => load({ SLIPWAY_MAX_INSTANCE_MEMORY_MB: '512' }),
    (error: unknown) => {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, /SLIPWAY_MAX_INSTANCE_MEMORY_MB.*SLIPWAY_APP_MEMORY_MB/);
      return true;
    },
  );
  assert.throws(() => load({ SLIPWAY_MAX_INSTANCE_CPU: '0.5' }), /SLIPWAY_MAX_INSTANCE_CPU/);
  assert.throws(
    () => load({ SLIPWAY_APPS_MEMORY_MB: '4096', SLIPWAY_MAX_INSTANCE_MEMORY_MB: '8192' }),
    /SLIPWAY_APPS_MEMORY_MB/,
  );
  assert.throws(() => load({ SLIPWAY_MAX_INSTANCES: '0' }), /SLIPWAY_MAX_INSTANCES/);
});

test('database storage: 10 GiB at most per deployment, 1 GiB by default, never a default above the maximum', () => {
  const set = load({ SLIPWAY_MAX_DATABASE_STORAGE_GI: '0.5' });
  assert.equal(set.limits.databaseStorageGi, 0.5);
  assert.equal(set.limits.defaultDatabaseStorageGi, 0.5, 'the default follows a maximum below it');
  assert.equal(set.databaseCheckIntervalMs, 15_000);
  assert.throws(
    () => load({ SLIPWAY_MAX_DATABASE_STORAGE_GI: '2', SLIPWAY_APP_DATABASE_STORAGE_GI: '3' }),
    /SLIPWAY_MAX_DATABASE_STORAGE_GI.*SLIPWAY_APP_DATABASE_STORAGE_GI/,
  );
  assert.throws(() => load({ SLIPWAY_MAX_DATABASE_STORAGE_GI: '0' }), /SLIPWAY_MAX_DATABASE_STORAGE_GI/);
  assert.throws(() => load({ SLIPWAY_DATABASE_CHECK_SECONDS: '0' }), /SLIPWAY_DATABASE_CHECK_SECONDS/);
});
