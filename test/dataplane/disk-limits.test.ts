/**
 * The disk limits' parts an operator sees without an app: the settings, the start-up warning when the
 * apps' data shares a file system with the embedded PostgreSQL cluster, and what the measure counts
 * (links are not followed, a tree it cannot read counts as over any limit).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { diskLimits } from '../../src/config-disk.ts';
import { ConfigError } from '../../src/config-values.ts';
import { createDiskLimiter } from '../../src/dataplane/disk-limits.ts';
import { measureTrees } from '../../src/dataplane/disk-usage.ts';

const MIB = 1024 * 1024;

async function scratch(base = os.tmpdir()): Promise<string> {
  return fs.mkdtemp(path.join(base, 'slipway-disk-'));
}

function recordingLogger(): {
  warnings: string[];
  logger: { info(): void; warn(message: string): void; error(): void };
} {
  const warnings: string[] = [];
  return {
    warnings,
    logger: { info: () => undefined, warn: (message: string) => warnings.push(message), error: () => undefined },
  };
}

test('settings: defaults beside the data directory, a relative apps directory from the working directory, bad values named', () => {
  const defaults = diskLimits({}, '/srv', '/srv/.slipway');
  assert.deepEqual(defaults, {
    appsDataDir: '/srv/.slipway/deployments',
    appDiskMb: 1024,
    buildDiskMb: 4096,
    checkIntervalMs: 5000,
    preallocate: false,
  });
  assert.equal(diskLimits({ SLIPWAY_APP_DISK_PREALLOCATE: '1' }, '/srv', '/srv/.slipway').preallocate, true);
  assert.throws(
    () => diskLimits({ SLIPWAY_APP_DISK_PREALLOCATE: 'thick' }, '/srv', '/srv/.slipway'),
    /SLIPWAY_APP_DISK_PREALLOCATE/,
  );
  assert.equal(diskLimits({ SLIPWAY_APPS_DATA_DIR: 'apps' }, '/srv', '/srv/.slipway').appsDataDir, '/srv/apps');
  assert.throws(() => diskLimits({ SLIPWAY_APP_DISK_MB: '0' }, '/srv', '/srv/.slipway'), ConfigError);
  assert.throws(() => diskLimits({ SLIPWAY_BUILD_DISK_MB: 'lots' }, '/srv', '/srv/.slipway'), /SLIPWAY_BUILD_DISK_MB/);
});

test('the start warns, naming both paths, when the apps data shares the embedded cluster file system, and not otherwise', async () => {
  const dataDir = await scratch();
  await fs.mkdir(path.join(dataDir, 'postgres'));
  const config = (appsDataDir: string, databaseUrl: string | null = null) => ({
    databaseUrl,
    dataDir,
    disk: { appsDataDir, appDiskMb: 8, buildDiskMb: 8, checkIntervalMs: 1000, preallocate: false },
  });
  const same = recordingLogger();
  const limiter = await createDiskLimiter({ config: config(path.join(dataDir, 'deployments')), logger: same.logger });
  // A service that can mount gives each deployment a file system of its own; else the limit is measured.
  assert.match(
    limiter.description,
    process.getuid?.() === 0
      ? /disk: loop-mounted, each deployment's data and home a file system of 8 MiB/
      : /disk: measured every 1 s, 8 MiB per deployment's data and home .*does not run as root/,
  );
  assert.equal(same.warnings.length, 1);
  assert.ok(same.warnings[0]!.includes(path.join(dataDir, 'deployments')));
  assert.ok(same.warnings[0]!.includes(path.join(dataDir, 'postgres')));
  // Another file system (a tmpfs), or a database the service does not keep: no warning.
  const elsewhere = await scratch('/dev/shm');
  const apart = recordingLogger();
  await createDiskLimiter({ config: config(elsewhere), logger: apart.logger });
  assert.deepEqual(apart.warnings, []);
  const external = recordingLogger();
  await createDiskLimiter({
    config: config(path.join(dataDir, 'deployments'), 'postgres://db/slipway'),
    logger: external.logger,
  });
  assert.deepEqual(external.warnings, []);
  await fs.rm(elsewhere, { recursive: true, force: true });
  await fs.rm(dataDir, { recursive: true, force: true });
});

test('the measure counts what a tree holds, follows no link out of it, and says when part of it is unreadable', async () => {
  const dir = await scratch();
  const outside = await scratch();
  await fs.writeFile(path.join(outside, 'big'), Buffer.alloc(8 * MIB, 1));
  await fs.mkdir(path.join(dir, 'tree'));
  await fs.writeFile(path.join(dir, 'tree', 'file'), Buffer.alloc(2 * MIB, 1));
  await fs.symlink(outside, path.join(dir, 'tree', 'link'));
  await fs.symlink(path.join(outside, 'big'), path.join(dir, 'tree', 'file-link'));
  const usage = await measureTrees([path.join(dir, 'tree')]);
  assert.equal(usage.unreadable, false);
  assert.ok(usage.bytes >= 2 * MIB && usage.bytes < 3 * MIB, `counted ${usage.bytes} bytes`);
  // A missing tree counts nothing.
  assert.equal((await measureTrees([path.join(dir, 'gone')])).bytes, 0);
  if (process.getuid?.() !== 0) {
    // Only a service that is not root can be kept out of a directory.
    await fs.mkdir(path.join(dir, 'tree', 'hidden'));
    await fs.writeFile(path.join(dir, 'tree', 'hidden', 'file'), 'x');
    await fs.chmod(path.join(dir, 'tree', 'hidden'), 0);
    assert.equal((await measureTrees([path.join(dir, 'tree')])).unreadable, true);
    await fs.chmod(path.join(dir, 'tree', 'hidden'), 0o700);
  }
  await fs.rm(dir, { recursive: true, force: true });
  await fs.rm(outside, { recursive: true, force: true });
});
