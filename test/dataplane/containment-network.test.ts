/**
 * Containment of an app's network, played by the probe app (test/dataplane/containment-apps.ts): from
 * inside its sandbox it tries the machine's loopback services (a stand-in for its Redis), another app's
 * published port, the service's PostgreSQL and API by every address it can think of, other databases of
 * the server with its own role, and then floods its own database with connections.
 *
 * What the old code did: apps shared the host's network (`HOST=127.0.0.1` of the machine), so the app
 * reached the stand-in Redis and the other app's port directly; its role could connect to the service's
 * own database (PUBLIC kept CONNECT on it) and had no connection limit, so the flood took the server's
 * connection slots (200) until neither the service nor other apps could connect. Both tests fail there.
 */
import assert from 'node:assert/strict';
import { execSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import pg from 'pg';
import { probeApp } from './containment-apps.ts';
import {
  deployApp,
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

interface App {
  id: string;
  url: string;
  slug: string;
  database: string;
  role: string;
}

let service: TestService;
/** A stand-in for the machine's Redis on the host's loopback: answers `+PONG`, counts who connected. */
let redis: net.Server;
let redisConnections = 0;
let attacker: App;
let neighbour: App;

async function deploy(name: string): Promise<App> {
  const { id, url } = await deployApp(service, probeApp(), name);
  const runtime = await service.database.db
    .selectFrom('deployment_runtimes')
    .selectAll()
    .where('deployment_id', '=', id)
    .executeTakeFirstOrThrow();
  return {
    id,
    url,
    slug: new URL(url).hostname.split('.')[0]!,
    database: runtime.database_name!,
    role: runtime.role_name!,
  };
}

before(async () => {
  redis = net.createServer((socket) => {
    redisConnections++;
    socket.on('data', () => socket.write('+PONG\r\n'));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => redis.listen(0, '127.0.0.1', resolve));
  service = await startTestService();
  attacker = await deploy('attacker');
  neighbour = await deploy('neighbour');
});
after(async () => {
  await service?.close();
  await new Promise((resolve) => redis?.close(resolve));
});

async function call(app: App, pathname: string): Promise<any> {
  const answer = await requestApp(service, app.url, pathname);
  assert.equal(answer.status, 200, `${pathname}: ${answer.status} ${answer.body}`);
  return JSON.parse(answer.body);
}

const tcp = (app: App, host: string, port: number) =>
  call(app, `/tcp?host=${encodeURIComponent(host)}&port=${port}&timeout=3000`);
const pgLogin = (app: App, parts: Record<string, string> = {}) =>
  call(app, `/pg?${new URLSearchParams(parts).toString()}`);

/** The host's own addresses other than loopback, and slirp4netns's name for the host (10.0.2.2). */
function otherHostAddresses(): string[] {
  const external = Object.values(os.networkInterfaces())
    .flat()
    .filter((a) => a && a.family === 'IPv4' && !a.internal)
    .map((a) => a!.address);
  return ['10.0.2.2', ...external];
}

test(
  "an app reaches its own database and the API, and nothing else of the host's: not its Redis, another app, the service's database",
  { timeout: 10 * 60_000 },
  async () => {
    const redisPort = (redis.address() as net.AddressInfo).port;
    const [neighbourTarget] = service.edge.targets(neighbour.slug);
    assert.ok(neighbourTarget, 'the neighbour is routed');
    const neighbourPort = Number(neighbourTarget.port);
    const databasePort = Number(new URL(service.database.url).port);
    // The honest part: the stand-in answers on the host, and the neighbour serves at its URL.
    const fromHost = await new Promise<string>((resolve, reject) => {
      const socket = net.connect({ host: '127.0.0.1', port: redisPort }, () => socket.write('PING\r\n'));
      socket.on('data', (chunk) => {
        resolve(chunk.toString());
        socket.destroy();
      });
      socket.on('error', reject);
    });
    assert.equal(fromHost, '+PONG\r\n');
    assert.equal((await call(neighbour, '/healthz')).ok, true);
    const seenBefore = redisConnections;

    // The machine's Redis and the neighbour's published port, by every address of the host; and the
    // service's PostgreSQL and API, other than through the app's own forwards (which are the namespace's
    // 127.0.0.1:<database port> and 127.0.0.1:<API port>). All tried at once: a blocked try may wait out
    // its whole connect timeout, and none depends on another.
    const probes = [
      ...['127.0.0.1', 'localhost', ...otherHostAddresses()].flatMap((host) => [
        { what: 'the Redis on the host', host, port: redisPort },
        { what: "the neighbour app's port", host, port: neighbourPort },
      ]),
      ...otherHostAddresses().flatMap((host) => [
        { what: "the service's PostgreSQL", host, port: databasePort },
        { what: "the service's API", host, port: service.port },
      ]),
    ];
    const results = await Promise.all(probes.map(({ host, port }) => tcp(attacker, host, port)));
    probes.forEach(({ what, host, port }, i) => {
      const result = results[i];
      assert.equal(result.connected, false, `the app reached ${what} at ${host}:${port}: ${JSON.stringify(result)}`);
      assert.doesNotMatch(result.answer, /PONG/);
    });
    assert.equal(redisConnections, seenBefore, 'the Redis on the host saw a connection from the app');

    // Its own database works, as its own role.
    const own = await pgLogin(attacker);
    assert.equal(own.ok, true, JSON.stringify(own));
    assert.equal(own.role, attacker.role);
    assert.equal(own.database, attacker.database);
    assert.equal(own.one, '1');
    // The API answers through its forward.
    const api = await call(attacker, '/api?path=/healthz');
    assert.equal(api.status, 200, JSON.stringify(api));

    // Through its forward, the server lets its role into its own database only.
    const serviceDatabase = new URL(service.database.url).pathname.slice(1);
    const attempts: Record<string, string>[] = [
      { database: serviceDatabase },
      { database: 'postgres' },
      { database: 'template1' },
      { database: neighbour.database },
      // The superuser, without a password and with a guess.
      { user: 'postgres', password: '', database: 'postgres' },
      { user: 'postgres', password: 'postgres', database: serviceDatabase },
      // The neighbour's role with the attacker's password.
      { user: neighbour.role, database: neighbour.database },
    ];
    const logins = await Promise.all(attempts.map((parts) => pgLogin(attacker, parts)));
    attempts.forEach((parts, i) => {
      assert.equal(
        logins[i].ok,
        false,
        `the app logged in with ${JSON.stringify(parts)}: ${JSON.stringify(logins[i])}`,
      );
    });
    // The neighbour's own database still works for the neighbour.
    assert.equal((await pgLogin(neighbour)).ok, true);
  },
);

test(
  'an app flooding its database gets at most its connection limit, while the service and another app keep theirs',
  { timeout: 10 * 60_000 },
  async (t) => {
    const limit = await service.database.pool.query<{ rolconnlimit: number }>(
      'select rolconnlimit from pg_roles where rolname = $1',
      [attacker.role],
    );
    const roleLimit = limit.rows[0]!.rolconnlimit;
    assert.ok(roleLimit > 0 && roleLimit <= 50, `the app's role has connection limit ${roleLimit}`);

    // Logged-in connections until refused, then connections that never log in; all held.
    const flood = await call(attacker, '/flood?max=300');
    t.diagnostic(`flood: ${JSON.stringify(flood)}`);
    assert.ok(flood.authed >= 1, `the app got no connection at all: ${JSON.stringify(flood)}`);
    assert.ok(flood.firstError, `the app was never refused: ${JSON.stringify(flood)}`);
    assert.ok(
      flood.authed <= roleLimit,
      `the app holds ${flood.authed} logged-in connections: ${JSON.stringify(flood)}`,
    );
    // Connections that never log in hold a server slot too, until the server's authentication timeout.
    assert.ok(
      flood.authedOpen + flood.rawHeld <= roleLimit + 10,
      `the app holds ${flood.authedOpen + flood.rawHeld} connections to the server: ${JSON.stringify(flood)}`,
    );

    try {
      // Meanwhile the service answers, can open new connections, and the neighbour uses its database.
      for (let i = 0; i < 5; i++) {
        const listed = await service.api('GET', '/v2/deployments');
        assert.equal(listed.status, 200, JSON.stringify(listed.body));
        const client = new pg.Client({ connectionString: service.database.url });
        await client.connect();
        try {
          assert.equal((await client.query('select 1 as one')).rows[0].one, 1);
        } finally {
          await client.end();
        }
        const neighbourLogin = await pgLogin(neighbour);
        assert.equal(neighbourLogin.ok, true, `the neighbour lost its database: ${JSON.stringify(neighbourLogin)}`);
        assert.equal((await call(neighbour, '/healthz')).ok, true);
      }
      // The attacker itself can have no more.
      assert.equal((await pgLogin(attacker)).ok, false, 'the app got a connection beyond its limit');
    } finally {
      await call(attacker, '/release');
    }
    // Released, its database is its own again (once the server has seen the connections go).
    await eventually('the app to log in again', async () => (await pgLogin(attacker)).ok);
  },
);

/** A PING server on a Unix socket of the host; `+PONG` to every line. */
async function unixServer(where: string): Promise<{ server: net.Server; connections: () => number }> {
  let connections = 0;
  const server = net.createServer((socket) => {
    connections++;
    socket.on('data', () => socket.write('+PONG\r\n'));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(where, resolve);
  });
  return { server, connections: () => connections };
}

/**
 * A network namespace holds TCP and abstract Unix sockets, not the Unix sockets that are files: those
 * are reached through the file system, which the sandbox shows read-only, and connecting needs no write
 * access to the file system. The machine's Redis (`unixsocket /run/redis/redis.sock`, `unixsocketperm
 * 777`), PostgreSQL (`/var/run/postgresql/.s.PGSQL.5432`, mode 0777 by default) and MariaDB
 * (`/run/mysqld/mysqld.sock`) listen on such files.
 *
 * What the old code did: the same read-only view of `/`, and the host's network: both reachable.
 */
/** An install command that tries TCP targets (`PROBE_TARGETS`, host:port, comma-separated) and says how each went. */
const BUILD_PROBE = `
const net = require('node:net');
const targets = process.env.PROBE_TARGETS.split(',');
let left = targets.length;
for (const target of targets) {
  const [host, port] = target.split(':');
  const socket = net.connect({ host, port: Number(port) });
  const done = (what) => {
    console.log('BUILD-PROBE ' + target + ' ' + what);
    socket.destroy();
    if (--left === 0) process.exit(0);
  };
  socket.setTimeout(3000, () => done('blocked TIMEOUT'));
  socket.once('connect', () => done('connected'));
  socket.once('error', (e) => done('blocked ' + e.code));
}
`;

/**
 * A build runs the user's install and build commands: it is the app's code as much as the app is, with
 * a network namespace of its own too (egress for package registries, nothing of the host's loopback:
 * and, unlike an app, no forward to a database or the API).
 *
 * What the old code did: builds ran in the host's network and connected to all of these.
 */
test("a build reaches nothing of the host's loopback either", { timeout: 5 * 60_000 }, async () => {
  const redisPort = (redis.address() as net.AddressInfo).port;
  const [neighbourTarget] = service.edge.targets(neighbour.slug);
  assert.ok(neighbourTarget);
  const targets = [
    `127.0.0.1:${redisPort}`,
    `10.0.2.2:${redisPort}`,
    `127.0.0.1:${new URL(service.database.url).port}`,
    `127.0.0.1:${service.port}`,
    `127.0.0.1:${neighbourTarget.port}`,
  ];
  const files = probeApp({ slipway: { install: 'node build-probe.cjs', env: { PROBE_TARGETS: targets.join(',') } } });
  const tarball = await uploadApp(service, { ...files, 'build-probe.cjs': BUILD_PROBE });
  const seenBefore = redisConnections;
  const created = await service.api('POST', '/v2/deployments', {
    name: 'probing-build',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const log = await revisionLog(service, created.body.id, revision.id, 'build');
  for (const target of targets) {
    const line = log.find((l) => l.startsWith(`BUILD-PROBE ${target} `));
    assert.ok(line, `no probe of ${target} in the build log:\n${log.join('\n')}`);
    assert.match(line, / blocked /, `the build reached ${target}`);
  }
  assert.equal(redisConnections, seenBefore, 'the Redis on the host saw a connection from the build');
});

/**
 * Every start of a sandboxed process sets up a network namespace of its own (bubblewrap's loopback, then
 * slirp4netns's way out). Workers that check they cannot reach the host's Redis and exit are restarted
 * again and again: each of their many starts must be contained (exit 3: the Redis was unreachable) and
 * none may fail in setting up its sandbox (bubblewrap's own errors, in the deploy log).
 *
 * What the old code did: the workers shared the host's network, reached the Redis and exited 4.
 */
test(
  'each of many starts of a sandbox is contained, and none fails in its setup',
  { timeout: 5 * 60_000 },
  async (t) => {
    const STARTS = 40;
    const redisPort = (redis.address() as net.AddressInfo).port;
    const worker = `
const socket = require('node:net').connect(Number(process.env.REDIS_PORT), '127.0.0.1');
socket.on('connect', () => process.exit(4));
socket.on('error', () => process.exit(3));
`;
    const files = probeApp({ slipway: { worker: 'node probe-worker.cjs', env: { REDIS_PORT: String(redisPort) } } });
    const tarball = await uploadApp(service, { ...files, 'probe-worker.cjs': worker });
    const seenBefore = redisConnections;
    const created = await service.api('POST', '/v2/deployments', {
      name: 'restarting-workers',
      source: 'internal_source',
      // Four workers restart side by side: more starts in the time.
      source_config: { resource_spec: { queue_min_scale: 4 } },
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
    // A start of its web instance can fail the same way: then the revision says so.
    assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    const isExit = (line: string) => /^Instance worker-\d+ /.test(line);
    const log = await eventually(
      `${STARTS} exits of the workers`,
      async () => {
        const lines = await revisionLog(service, created.body.id, revision.id, 'deploy');
        return lines.filter(isExit).length >= STARTS ? lines : null;
      },
      { seconds: (4 * 60_000) / 1000 },
    ).catch(async (e) => {
      const lines = await revisionLog(service, created.body.id, revision.id, 'deploy');
      const per: Record<string, number> = {};
      for (const l of lines.filter(isExit)) {
        const k = l.split(' ')[1]!;
        per[k] = (per[k] ?? 0) + 1;
      }
      console.log('DEBUG', lines.length, JSON.stringify(per), JSON.stringify(lines.slice(-25)));
      console.log(
        'DEBUGPS',
        JSON.stringify(
          execSync(
            'ps -eo pid,ppid,etime,stat,cmd | grep -E "bwrap|slirp|probe-worker|socat" | grep -v grep | cut -c1-250',
          ).toString(),
        ),
      );
      throw e;
    });
    const exits = log.filter(isExit);
    const unexpected = exits.filter((l) => !l.includes('exited with code 3'));
    // A slirp4netns that ended before it was ready is tried again, and the log says so (sandbox-network.ts):
    // that is not a failed start. Every other word of the sandbox's setup is.
    const retried = log.filter((l) => l.startsWith("The sandbox's network took a second try"));
    if (retried.length > 0) t.diagnostic(`network setups tried again: ${retried.join(' | ')}`);
    const sandboxErrors = log.filter(
      (l) => !retried.includes(l) && /bwrap|slirp4netns|Could not set up the sandbox/.test(l),
    );
    assert.deepEqual(
      { unexpected, sandboxErrors },
      { unexpected: [], sandboxErrors: [] },
      `of ${exits.length} starts of the workers, some were not contained or did not start`,
    );
    assert.equal(redisConnections, seenBefore, 'the Redis on the host saw a connection from a worker');
    const removed = await service.api('DELETE', `/v2/deployments/${created.body.id}`);
    assert.equal(removed.status, 204);
  },
);

test("an app cannot reach the machine's services through their Unix sockets", { timeout: 5 * 60_000 }, async () => {
  // Where daemons put their sockets: /run, and their state directories (MariaDB's under /var/lib on
  // Fedora-like systems, a container engine's, spool directories), and places an operator may use.
  // An ordinary user (CI runs this file as one too) can put a socket only where anyone may: /var/tmp.
  const parents: string[] = [];
  for (const parent of ['/run', '/var/lib', '/var/spool', '/var/tmp', '/srv'])
    if ((await fs.access(parent, fs.constants.W_OK).catch(() => false)) !== false) parents.push(parent);
  const dir = path.join(parents[0]!, `slipway-containment-${randomBytes(4).toString('hex')}`);
  const others = parents.slice(1).map((p) => path.join(p, `slipway-containment-${randomBytes(4).toString('hex')}`));
  await fs.mkdir(dir, { mode: 0o755 });
  for (const other of others) await fs.mkdir(other, { mode: 0o755, recursive: true });
  const file = path.join(dir, 'redis.sock');
  const abstract = `\0slipway-containment-${randomBytes(4).toString('hex')}`;
  const onFile = await unixServer(file);
  const onAbstract = await unixServer(abstract);
  const onOthers = await Promise.all(others.map((other) => unixServer(path.join(other, 'daemon.sock'))));
  const otherFiles = others.map((other) => path.join(other, 'daemon.sock'));
  try {
    for (const where of [file, ...otherFiles]) await fs.chmod(where, 0o777);
    // The honest part: all answer on the host.
    for (const where of [file, abstract, ...otherFiles]) {
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(where, () => socket.write('PING\r\n'));
        socket.on('data', (chunk) => {
          resolve(chunk.toString());
          socket.destroy();
        });
        socket.on('error', reject);
      });
      assert.equal(answer, '+PONG\r\n');
    }
    const seen = () => [onFile, onAbstract, ...onOthers].reduce((sum, s) => sum + s.connections(), 0);
    const before = seen();
    for (const where of [file, abstract, ...otherFiles]) {
      const result = await call(attacker, `/unix?path=${encodeURIComponent(where)}`);
      assert.equal(
        result.connected,
        false,
        `the app reached the host's socket ${JSON.stringify(where)}: ${JSON.stringify(result)}`,
      );
    }
    assert.equal(seen(), before, 'a socket of the host saw the app');
  } finally {
    for (const s of [onFile, onAbstract, ...onOthers]) await new Promise((resolve) => s.server.close(resolve));
    for (const d of [dir, ...others]) await fs.rm(d, { recursive: true, force: true });
  }
});
