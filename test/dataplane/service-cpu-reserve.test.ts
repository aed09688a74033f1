/**
 * The service's CPU reserve (src/dataplane/service-cpu-reserve.ts): where the host lets it, the service
 * and its embedded PostgreSQL weigh four times as much as all apps together, while HAProxy and the apps' slirp4netns
 * (what carries the apps' traffic) stay in the group the service came from.
 *
 * The cgroup v2 cases run against a fake hierarchy (test/fakes/cgroup-v2.ts): the test machines have
 * cgroup v1. The real case runs the service as an operator does, on this machine's cgroups: as root it
 * moves into its group; as an ordinary user without a delegated v2 group it says it has no reserve.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import { reserveServiceCpu } from '../../src/dataplane/service-cpu-reserve.ts';
import { parentGroupName } from '../../src/dataplane/resource-limits.ts';
import { createFakeCgroupV2, type FakeCgroupV2 } from '../fakes/cgroup-v2.ts';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';
import { call, cleanUp, logLines, makeDataDir, postgresPid, startService, stop } from '../support/service-harness.ts';
import { oneFileApp, uploadApp } from './data-plane-harness.ts';

const PARENT = parentGroupName(0, '/var/lib/slipway');
const SERVICE_PID = 4242;
const KEY = 'slw_cpu_reserve_test_bootstrap_key_0123456';

/** The reserve of the service (pid SERVICE_PID) on the fake hierarchy, as `uid` in the group `own`. */
function reserveOn(fake: FakeCgroupV2, uid: number, own: string, cpus = 2, enabled = true) {
  return reserveServiceCpu({
    enabled,
    parent: PARENT,
    root: fake.root,
    io: fake.fs,
    cpus,
    pid: SERVICE_PID,
    uid,
    selfCgroup: `0::${own}\n`,
  });
}

describe('the CPU reserve on cgroup v2 (a fake hierarchy)', () => {
  test('as root in the root group (a container, a host without systemd): a group of its own that weighs four times as much as all apps, the service moved in, and out again at release', async (t) => {
    const fake = await createFakeCgroupV2();
    t.after(() => fake.cleanup());
    const reserve = await reserveOn(fake, 0, '/', 4);
    const group = `${PARENT}-service`;
    assert.equal(reserve.group, path.join(fake.root, group));
    assert.equal((await fake.read(group, 'cpu.weight')).trim(), '1600', 'four times the apps: 4 CPUs of 100, times 4');
    assert.deepEqual((await fake.read(group, 'cgroup.procs')).trim().split(/\s+/), [String(SERVICE_PID)]);
    assert.match(reserve.description, /weighs 1600 \(cpu\.weight\), 4 times what all apps together weigh/);
    // What carries app traffic is started back in the root group by a shell that moves itself there.
    const argv = reserve.ordinary(['/usr/sbin/haproxy', '-f', 'x.cfg']);
    assert.deepEqual(argv.slice(-3), ['/usr/sbin/haproxy', '-f', 'x.cfg']);
    assert.equal(argv[3], path.join(fake.root, 'cgroup.procs'));
    await reserve.release();
    assert.ok((await fake.read('', 'cgroup.procs')).split(/\s+/).includes(String(SERVICE_PID)), 'moved back');
    await assert.rejects(fs.access(path.join(fake.root, group)), 'the group is removed');
  });

  test("as root in a systemd unit's group: not moved out of the unit; the start log names CPUWeight=", async (t) => {
    const fake = await createFakeCgroupV2();
    t.after(() => fake.cleanup());
    await fake.group('system.slice/slipway.service', { procs: [SERVICE_PID] });
    const reserve = await reserveOn(fake, 0, '/system.slice/slipway.service');
    assert.equal(reserve.group, null);
    assert.match(reserve.description, /CPUWeight=/);
    assert.deepEqual(await fs.readdir(fake.root).then((names) => names.filter((n) => n.includes('-service'))), []);
    assert.deepEqual(reserve.ordinary(['slirp4netns']), ['slirp4netns']);
  });

  test("as the unit's ordinary user in its delegated leaf (DelegateSubgroup=supervisor): the leaf weighs four times as much as all apps, nothing moves", async (t) => {
    const unit = 'system.slice/slipway.service';
    const fake = await createFakeCgroupV2({ writable: [unit] });
    t.after(() => fake.cleanup());
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(`${unit}/supervisor`, { procs: [SERVICE_PID] });
    const reserve = await reserveOn(fake, 990, `/${unit}/supervisor`);
    assert.equal(reserve.group, path.join(fake.root, unit, 'supervisor'));
    assert.equal(
      (await fake.read(`${unit}/supervisor`, 'cpu.weight')).trim(),
      '800',
      'four times the apps: 2 CPUs of 100, times 4',
    );
    assert.deepEqual(reserve.ordinary(['slirp4netns']), ['slirp4netns']);
  });

  test('as an ordinary user without delegation, or switched off: no reserve, and the start log says why', async (t) => {
    const fake = await createFakeCgroupV2({ writable: [] });
    t.after(() => fake.cleanup());
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('user.slice/user-1000.slice/session-3.scope', { procs: [SERVICE_PID] });
    const session = '/user.slice/user-1000.slice/session-3.scope';
    const refused = await reserveOn(fake, 1000, session);
    assert.equal(refused.group, null);
    assert.match(refused.description, /no CPU reserve: .*not writable by the service/);
    const off = await reserveOn(fake, 1000, session, 2, false);
    assert.match(off.description, /SLIPWAY_SERVICE_CPU_RESERVE=0/);
  });
});

describe('the CPU reserve of the service as an operator runs it', () => {
  after(cleanUp);

  /** The cpu group of a process: v1's cpu hierarchy where mounted, else v2's. */
  async function cpuGroupOf(pid: number): Promise<string> {
    const lines = (await fs.readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n');
    const v1 = lines.find((line) => line.split(':')[1]?.split(',').includes('cpu'));
    return (v1 ?? lines.find((line) => line.startsWith('0::'))!).split(':').slice(2).join(':');
  }
  async function childrenOf(pid: number): Promise<number[]> {
    const text = await fs.readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
    return text.split(/\s+/).filter(Boolean).map(Number);
  }
  async function comm(pid: number): Promise<string> {
    return (await fs.readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '')).trim();
  }

  test('the service and its PostgreSQL weigh four times as much as all apps together; HAProxy and an app’s slirp4netns stay outside; the group goes at stop', async () => {
    const dataDir = await makeDataDir();
    const service = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY, LOG_LEVEL: 'info' });
    const pid = service.child.pid!;
    const said = logLines(service.stdout()).find((line) => String(line.msg).startsWith('CPU: '));
    assert.ok(said, `the start log says what the service weighs: ${service.stdout().slice(0, 2_000)}`);
    const group = await cpuGroupOf(pid);
    if (process.getuid?.() !== 0) {
      // This machine gives an ordinary user no delegated cgroup v2 group: said, and the service runs on.
      assert.match(String(said.msg), /no CPU reserve/);
      assert.equal((await call(service, 'GET', '/v2/deployments', KEY)).status, 200);
      await stop(service);
      return;
    }
    assert.match(group, /-service$/, `the service's cpu group: ${group}`);
    const v1 = (await fs.readFile('/proc/self/cgroup', 'utf8')).split('\n').some((l) => /:cpu[,:]/.test(l));
    const dir = v1 ? path.join('/sys/fs/cgroup/cpu', group) : path.join('/sys/fs/cgroup', group);
    const weight = Number((await fs.readFile(path.join(dir, v1 ? 'cpu.shares' : 'cpu.weight'), 'utf8')).trim());
    assert.equal(
      weight,
      (v1 ? 1024 : 100) * os.availableParallelism() * 4,
      'four times the apps: 4 ordinary processes per CPU',
    );
    assert.equal(await cpuGroupOf((await postgresPid(dataDir))!), group, 'the embedded PostgreSQL is in it too');
    const haproxy = Number((await fs.readFile(path.join(dataDir, 'edge', 'haproxy.pid'), 'utf8')).trim());
    assert.notEqual(await cpuGroupOf(haproxy), group, 'HAProxy carries the apps’ traffic outside the reserve');

    const server = `import http from 'node:http';
http.createServer((req, res) => res.end('ok')).listen(Number(process.env.PORT), process.env.HOST);`;
    const tarball = await uploadApp(service, oneFileApp(server, { health_check_path: '/', database: false }), KEY);
    const created = await call(service, 'POST', '/v2/deployments', KEY, {
      name: 'cpu-reserve',
      source: 'internal_source',
      source_config: {},
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const slirp = await eventually('the app’s slirp4netns', async () => {
      for (const child of await childrenOf(pid)) if ((await comm(child)) === 'slirp4netns') return child;
      return null;
    });
    assert.notEqual(await cpuGroupOf(slirp), group, 'slirp4netns carries the app’s traffic outside the reserve');

    assert.deepEqual(await stop(service), { code: 0, signal: null });
    await assert.rejects(fs.access(dir), 'the group is removed at stop');
  });
});
