/**
 * The hostile app of the containment tests (test/dataplane/containment-*.test.ts): one small Node.js
 * server without dependencies (it talks to PostgreSQL with the example app's pg-lite.js) whose
 * endpoints each try one way out of its sandbox and report what happened, so that a test can assert
 * what the attacker could and could not do:
 *
 * - at start: writes a probe to HOME, /tmp and SLIPWAY_DATA_DIR, lists what SLIPWAY_DATA_DIR held;
 *   with ATTACK=1 it then loops as fast as it can swapping directories of its own source and of its
 *   HOME for symbolic links to the service's data directory (TARGET_DIR), and writing into its source
 *   (and leaves links to that directory in SLIPWAY_DATA_DIR); with ATTACK_DATA=1 it swaps directories of
 *   SLIPWAY_DATA_DIR the same way;
 * - GET /status: what the start-up probes and the attack loop could do;
 * - GET /search: every file it can find in the places it can write or the service keeps files, with a
 *   hash of its content, and direct reads of the service's files;
 * - GET /tcp?host=&port=: a TCP connection, a `PING`, the answer; GET /unix?path=: the same to a Unix
 *   socket (a leading NUL byte: an abstract one);
 * - GET /pg?user=&password=&database=&host=&port=: a PostgreSQL login and `select 1` (DATABASE_URL with
 *   those parts replaced);
 * - GET /api?path=: a GET of SLIPWAY_API_URL + path;
 * - GET /flood?max=: PostgreSQL connections to DATABASE_URL until refused, then raw TCP connections to
 *   it that never log in, all held; GET /release closes them;
 * - GET /sh?cmd=: a shell command's exit code and output;
 * - GET /hog?mb=: allocates (and touches) memory up to `mb` MiB, answers if it is still alive;
 * - GET /fill?dir=&mb=: writes a file of `mb` MiB in `dir` (a tmpfs: memory), then removes it;
 * - GET /bomb?marker=&max=: spawns `sleep 600` children named `marker` until spawning fails;
 * - HOG_AT_START_MB: allocates that much before it listens.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/agent-app');

const SERVER = String.raw`
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { connect } from './pg-lite.js';

const SRC = process.cwd();
const HOME = process.env.HOME;
const DATA = process.env.SLIPWAY_DATA_DIR;
const TARGET = process.env.TARGET_DIR || '/nonexistent-target';
const REVISION = process.env.SLIPWAY_REVISION_ID;

const codeOf = (e) => (e && e.code) || String((e && e.message) || e);
const bump = (map, key) => (map[key] = (map[key] || 0) + 1);
const sha = (buffer) => createHash('sha256').update(buffer).digest('hex');

// A revision that cannot fit its limit: the memory is taken (and touched) before it listens.
const kept = [];
for (let mb = 0; mb < Number(process.env.HOG_AT_START_MB || 0); mb += 16) kept.push(Buffer.alloc(16 << 20, 1));

// Start libuv's thread pool now: under a process limit a thread made later may be refused.
await fs.promises.readFile(path.join(SRC, 'package.json'));

function probeWrite(dir, name) {
  if (!dir) return 'unset';
  try {
    fs.writeFileSync(path.join(dir, name), String(REVISION));
    return fs.readFileSync(path.join(dir, name), 'utf8') === String(REVISION) ? 'ok' : 'mismatch';
  } catch (e) {
    return codeOf(e);
  }
}
function list(dir) {
  try {
    return fs.readdirSync(dir).sort();
  } catch (e) {
    return ['error:' + codeOf(e)];
  }
}
const startup = {
  revision: REVISION,
  dataSeen: DATA ? list(DATA) : [],
  home: probeWrite(HOME, 'home-probe'),
  tmp: probeWrite('/tmp', 'tmp-probe'),
  data: probeWrite(DATA, 'from-' + REVISION),
  env: { HOME, DATA, TMPDIR: process.env.TMPDIR, SRC, API: process.env.SLIPWAY_API_URL },
};

// ---- The attack loop: swap directories for links to the service's data directory, write the source.
const attack = {
  rounds: 0,
  src: { renamed: 0, linked: 0, errors: {} },
  home: { renamed: 0, linked: 0, errors: {} },
  data: { renamed: 0, linked: 0, errors: {} },
  srcWrites: { ok: 0, errors: {} },
};
function makeTree(base, count) {
  const names = [];
  for (let i = 0; i < count; i++) {
    const name = 'd' + String(i).padStart(3, '0');
    try {
      fs.mkdirSync(path.join(base, name, 'inner'), { recursive: true });
      fs.writeFileSync(path.join(base, name, 'file.txt'), 'x'.repeat(100));
      fs.writeFileSync(path.join(base, name, 'inner', 'file.txt'), 'y'.repeat(100));
    } catch {
      // Not writable (the source): its tree is already there, from the upload.
    }
    names.push(name);
  }
  return names;
}
function swap(base, names, stats, swapped) {
  for (const name of names) {
    const dir = path.join(base, name);
    try {
      fs.renameSync(dir, dir + '.away');
      stats.renamed++;
    } catch (e) {
      bump(stats.errors, codeOf(e));
      continue;
    }
    try {
      fs.symlinkSync(TARGET, dir);
      stats.linked++;
      swapped.push(dir);
    } catch (e) {
      bump(stats.errors, codeOf(e));
      try {
        fs.renameSync(dir + '.away', dir);
      } catch {
        // Left aside; the next round tries the others.
      }
    }
  }
}
function restore(swapped) {
  for (const dir of swapped) {
    try {
      fs.unlinkSync(dir);
      fs.renameSync(dir + '.away', dir);
    } catch {
      // Best effort: the next round goes on.
    }
  }
}
const ATTACK = process.env.ATTACK === '1';
const ATTACK_DATA = process.env.ATTACK_DATA === '1';
if (ATTACK || ATTACK_DATA) {
  const srcTree = path.join(SRC, 'tree');
  const srcNames = ATTACK ? fs.readdirSync(srcTree).filter((n) => !n.includes('.')) : [];
  const homeTree = path.join(HOME, 'tree');
  const homeNames = ATTACK ? makeTree(homeTree, 50) : [];
  const dataTree = DATA && ATTACK_DATA ? path.join(DATA, 'tree-' + REVISION) : null;
  const dataNames = dataTree ? makeTree(dataTree, Number(process.env.DATA_DIRS || 50)) : [];
  // Links left in place for good: a service that followed them (a copy, a chown, a delete) would be had.
  if (DATA) {
    for (const [name, to] of [
      ['link-to-service-dir', TARGET],
      ['link-to-key', path.join(TARGET, 'encryption.key')],
    ]) {
      try {
        fs.symlinkSync(to, path.join(DATA, name));
      } catch {
        // Made by an earlier revision.
      }
    }
  }
  const round = () => {
    attack.rounds++;
    const swapped = [];
    swap(srcTree, srcNames, attack.src, swapped);
    swap(homeTree, homeNames, attack.home, swapped);
    if (dataTree) swap(dataTree, dataNames, attack.data, swapped);
    for (const write of ATTACK ? [
      () => fs.writeFileSync(path.join(SRC, 'pwned.txt'), 'pwned'),
      () => fs.mkdirSync(path.join(srcTree, 'new-' + attack.rounds)),
      () => fs.symlinkSync(TARGET, path.join(SRC, 'link-' + attack.rounds)),
    ] : []) {
      try {
        write();
        attack.srcWrites.ok++;
      } catch (e) {
        bump(attack.srcWrites.errors, codeOf(e));
      }
    }
    // The links stay a moment (a copy walking the tree now walks into them), then the next round.
    setTimeout(() => {
      restore(swapped);
      setImmediate(round);
    }, 1);
  };
  setImmediate(round);
}

// ---- What the app can find.
const KEY_NAMES = ['encryption.key', 'postgres-password', 'first-admin-key', 'PG_VERSION', 'node-id'];
function search() {
  const files = {};
  const nameHits = [];
  let entries = 0;
  const roots = ['/home', '/tmp', '/var/tmp', '/dev/shm', '/run', '/root', '/mnt', '/srv', '/opt', TARGET, path.dirname(TARGET)];
  const seen = new Set();
  const walk = (p, depth) => {
    if (seen.has(p) || entries > 100000 || depth > 30) return;
    seen.add(p);
    entries++;
    let st;
    try {
      st = fs.lstatSync(p);
    } catch {
      return;
    }
    if (KEY_NAMES.includes(path.basename(p))) nameHits.push(p);
    if (st.isSymbolicLink()) {
      // Through the link: whatever it leads to, read as the app.
      try {
        const content = fs.readFileSync(p);
        files[p + ' (link)'] = sha(content);
      } catch (e) {
        files[p + ' (link)'] = 'error:' + codeOf(e);
      }
      return;
    }
    if (st.isDirectory()) {
      let names = [];
      try {
        names = fs.readdirSync(p);
      } catch {
        return;
      }
      for (const name of names) walk(path.join(p, name), depth + 1);
      return;
    }
    if (st.isFile() && st.size <= 1 << 20) {
      try {
        files[p] = sha(fs.readFileSync(p));
      } catch (e) {
        files[p] = 'error:' + codeOf(e);
      }
    }
  };
  for (const root of roots) walk(root, 0);
  const direct = {};
  for (const file of ['encryption.key', 'postgres-password', 'first-admin-key', 'postgres/PG_VERSION']) {
    const p = path.join(TARGET, file);
    try {
      direct[p] = 'read:' + sha(fs.readFileSync(p));
    } catch (e) {
      direct[p] = codeOf(e);
    }
  }
  for (const dir of ['', 'revisions', 'deployments', 'postgres']) {
    const p = path.join(TARGET, dir);
    try {
      direct[p] = 'listed:' + fs.readdirSync(p).join(',');
    } catch (e) {
      direct[p] = codeOf(e);
    }
  }
  return { files, nameHits, direct, entries };
}

// ---- Network probes.
function tcp(target, timeoutMs) {
  return new Promise((resolve) => {
    const socket = net.connect(target);
    let connected = false;
    let answer = '';
    const done = (result) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ connected, answer, ...result });
    };
    const timer = setTimeout(() => done({ code: 'TIMEOUT' }), timeoutMs);
    socket.on('connect', () => {
      connected = true;
      socket.write('PING\r\n');
    });
    socket.on('data', (chunk) => {
      answer += chunk.toString('utf8');
      if (answer.includes('\n')) done({});
    });
    socket.on('error', (e) => done({ code: e.code }));
    socket.on('close', () => done({ code: 'CLOSED' }));
  });
}

async function pg(query) {
  const url = new URL(process.env.DATABASE_URL || 'postgres://nobody@127.0.0.1:5432/none');
  if (query.has('user')) url.username = encodeURIComponent(query.get('user'));
  if (query.has('password')) url.password = encodeURIComponent(query.get('password'));
  if (query.has('database')) url.pathname = '/' + encodeURIComponent(query.get('database'));
  if (query.has('host')) url.hostname = query.get('host');
  if (query.has('port')) url.port = query.get('port');
  let client;
  try {
    client = await connect(url.toString(), { timeoutMs: 5000 });
    const { rows } = await client.query('select current_user as role, current_database() as database, 1 as one');
    return { ok: true, ...rows[0] };
  } catch (e) {
    return { ok: false, code: e.code, message: e.message };
  } finally {
    await client?.end().catch(() => undefined);
  }
}

const held = { authed: [], raw: [] };
async function flood(max) {
  let failures = 0;
  let firstError = null;
  for (let i = 0; i < max && failures < 5; i++) {
    try {
      const client = await connect(process.env.DATABASE_URL, { timeoutMs: 5000 });
      client.on('close', () => undefined);
      held.authed.push(client);
      failures = 0;
    } catch (e) {
      failures++;
      firstError ??= { code: e.code, message: e.message };
    }
  }
  // Then connections that never log in: each would hold a server slot until its authentication timeout.
  const url = new URL(process.env.DATABASE_URL);
  const raw = [];
  for (let i = 0; i < max; i++) {
    const socket = net.connect({ host: url.hostname, port: Number(url.port) });
    const entry = { open: true, answered: false };
    socket.on('data', () => (entry.answered = true));
    socket.on('connect', () => {
      const user = decodeURIComponent(url.username);
      const body = Buffer.concat([
        Buffer.from([0, 3, 0, 0]),
        Buffer.from('user\0' + user + '\0database\0' + url.pathname.slice(1) + '\0\0'),
      ]);
      const length = Buffer.alloc(4);
      length.writeInt32BE(body.length + 4);
      socket.write(Buffer.concat([length, body]));
    });
    socket.on('error', () => (entry.open = false));
    socket.on('close', () => (entry.open = false));
    raw.push(entry);
    held.raw.push(socket);
  }
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const authedOpen = held.authed.filter((c) => !c.closed).length;
  // Open, and the server answered the startup (asked for the password): a slot of the server taken.
  const rawHeld = raw.filter((e) => e.open && e.answered).length;
  return { authed: held.authed.length, authedOpen, firstError, rawOpen: raw.filter((e) => e.open).length, rawHeld };
}
async function release() {
  for (const socket of held.raw) socket.destroy();
  held.raw = [];
  await Promise.all(held.authed.map((c) => c.end().catch(() => undefined)));
  held.authed = [];
}

// ---- Resources.
const hogged = [];
function hog(mb) {
  for (let got = 0; got < mb; got += 16) hogged.push(Buffer.alloc(16 << 20, 1));
  const total = hogged.length * 16;
  hogged.length = 0;
  return { survived: true, mb: total };
}
function fill(dir, mb) {
  const chunk = Buffer.alloc(16 << 20, 2);
  const file = path.join(dir, 'fill-' + process.pid + '-' + Date.now());
  let written = 0;
  let error = null;
  let fd = null;
  try {
    fd = fs.openSync(file, 'w');
    for (; written < mb; written += 16) fs.writeSync(fd, chunk);
  } catch (e) {
    error = codeOf(e);
  } finally {
    if (fd !== null) fs.closeSync(fd);
    fs.rmSync(file, { force: true });
  }
  return { written, error };
}
async function bomb(marker, max) {
  let spawned = 0;
  let failedInARow = 0;
  const errors = {};
  for (let i = 0; i < max && failedInARow < 20; i++) {
    let child;
    try {
      child = spawn('sleep', ['600'], { argv0: marker, stdio: 'ignore' });
    } catch (e) {
      bump(errors, codeOf(e));
      failedInARow++;
      continue;
    }
    child.on('error', (e) => bump(errors, codeOf(e)));
    child.unref();
    if (child.pid === undefined) failedInARow++;
    else {
      spawned++;
      failedInARow = 0;
    }
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  return { spawned, errors };
}

const routes = {
  '/healthz': async () => ({ ok: true }),
  '/status': async () => ({
    revision: REVISION,
    startup,
    attack,
    srcWritable: attack.src.renamed > 0 || attack.srcWrites.ok > 0,
  }),
  '/search': async () => search(),
  '/tcp': async (q) => tcp({ host: q.get('host'), port: Number(q.get('port')) }, Number(q.get('timeout') || 3000)),
  '/unix': async (q) => tcp({ path: q.get('path') }, Number(q.get('timeout') || 3000)),
  '/pg': async (q) => pg(q),
  '/api': async (q) => {
    try {
      const response = await fetch(process.env.SLIPWAY_API_URL + (q.get('path') || '/healthz'));
      return { status: response.status, body: (await response.text()).slice(0, 200) };
    } catch (e) {
      return { status: 0, error: codeOf(e.cause || e) };
    }
  },
  '/flood': async (q) => flood(Number(q.get('max') || 300)),
  '/release': async () => {
    await release();
    return { released: true };
  },
  '/sh': async (q) =>
    new Promise((resolve) => {
      execFile('/bin/sh', ['-c', q.get('cmd')], { timeout: 20000 }, (error, stdout, stderr) =>
        resolve({ code: error ? error.code : 0, output: String(stdout) + String(stderr) }),
      );
    }),
  '/hog': async (q) => hog(Number(q.get('mb') || 1024)),
  '/fill': async (q) => fill(q.get('dir'), Number(q.get('mb') || 1024)),
  '/bomb': async (q) => bomb(q.get('marker'), Number(q.get('max') || 2000)),
};

http
  .createServer((req, res) => {
    const url = new URL(req.url, 'http://app');
    const route = routes[url.pathname];
    if (!route) {
      res.writeHead(404).end();
      return;
    }
    route(url.searchParams).then(
      (body) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      },
      (e) => {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: String((e && e.stack) || e) }));
      },
    );
  })
  .listen(Number(process.env.PORT), process.env.HOST, () => {
    console.log('probe app ' + REVISION + ' listening on port ' + process.env.PORT);
  });
`;

/**
 * The files of the probe app: `slipway` is merged into its slipway.json (e.g. `{env: {ATTACK: '1'}}`),
 * `treeDirs` directories (each with files) are made under `tree/` of its source for the attack loop.
 */
export function probeApp(
  options: { slipway?: Record<string, unknown>; treeDirs?: number } = {},
): Record<string, string> {
  const files: Record<string, string> = {
    'package.json': JSON.stringify({
      name: 'probe',
      private: true,
      type: 'module',
      scripts: { start: 'node server.js' },
    }),
    'server.js': SERVER,
    'pg-lite.js': fs.readFileSync(path.join(EXAMPLE, 'pg-lite.js'), 'utf8'),
    'slipway.json': JSON.stringify({ health_check_path: '/healthz', ...options.slipway }),
  };
  for (let i = 0; i < (options.treeDirs ?? 0); i++) {
    const dir = `tree/d${String(i).padStart(3, '0')}`;
    files[`${dir}/file.txt`] = 'x'.repeat(100);
    files[`${dir}/inner/file.txt`] = 'y'.repeat(100);
  }
  return files;
}
