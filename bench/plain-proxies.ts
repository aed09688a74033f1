/**
 * The yardsticks of the data plane bench's proxy runs (bench/data-plane.ts): Debian's nginx and HAProxy
 * in front of one app instance with the configuration anyone would write by hand (the instance in the
 * configuration file, connections to it kept alive, the proxy's defaults otherwise), each started by
 * the bench in a directory of its own. The service's own edge adds what apps are promised on top of
 * this: routing by host name from a table that changes at run time, credential stripping, its own error
 * answers. They run at ordinary priority, as the edge does, with their own defaults for threads and
 * workers (one per CPU; the edge runs half the CPUs as threads).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../src/db/embedded-postgres.ts';
import { findExecutable } from '../src/dataplane/executables.ts';

export interface PlainProxy {
  /** http://127.0.0.1:<port> */
  origin: string;
  close(): Promise<void>;
}

export type PlainProxyKind = 'nginx' | 'haproxy';

/** How long a proxy has to listen after it is started. */
const START_TIMEOUT_MS = 10_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** nginx: a keep-alive upstream of the one instance, otherwise nginx's defaults. */
export function plainNginxConfig(dir: string, listenPort: number, targetPort: number): string {
  return `daemon off;
master_process on;
worker_processes auto;
pid ${dir}/nginx.pid;
error_log stderr warn;
events {
  worker_connections 4096;
}
http {
  access_log off;
  client_body_temp_path ${dir}/body_temp;
  proxy_temp_path ${dir}/proxy_temp;
  fastcgi_temp_path ${dir}/fastcgi_temp;
  uwsgi_temp_path ${dir}/uwsgi_temp;
  scgi_temp_path ${dir}/scgi_temp;
  upstream app {
    server 127.0.0.1:${targetPort};
    keepalive 32;
  }
  server {
    listen 127.0.0.1:${listenPort};
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
    }
  }
}
`;
}

/** HAProxy: the instance as a server of the configuration file, otherwise HAProxy's defaults (keep-alive both sides). */
export function plainHaproxyConfig(listenPort: number, targetPort: number): string {
  return `global
  log stderr format raw local0 warning
defaults
  mode http
  log global
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout http-keep-alive 75s
frontend app
  bind 127.0.0.1:${listenPort}
  default_backend app
backend app
  server instance 127.0.0.1:${targetPort}
`;
}

/** The proxy's binary, or null when it is not installed (the bench then leaves this yardstick out). */
export const findPlainProxy = (kind: PlainProxyKind) => findExecutable(kind);

/**
 * Starts the proxy at `binary` in front of 127.0.0.1:`targetPort` on a free loopback port, in the
 * foreground; it dies with the bench (setpriv --pdeathsig where util-linux has it) or when closed.
 */
export async function startPlainProxy(kind: PlainProxyKind, binary: string, targetPort: number): Promise<PlainProxy> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), `slipway-bench-${kind}-`));
  // nginx's workers run as nobody when the bench is root: they pass through, and nginx makes its
  // temporary directories theirs.
  await fs.chmod(dir, 0o711);
  const port = await freePort();
  const configFile = path.join(dir, `${kind}.conf`);
  await fs.writeFile(
    configFile,
    kind === 'nginx' ? plainNginxConfig(dir, port, targetPort) : plainHaproxyConfig(port, targetPort),
  );
  const args = kind === 'nginx' ? ['-p', `${dir}/`, '-c', configFile, '-e', 'stderr'] : ['-db', '-f', configFile];
  const setpriv = await findExecutable('setpriv');
  // At the priority the service gives its own edge (ordinary): the proxies are compared, not their priorities.
  const command = [binary, ...args];
  const argv = setpriv ? [setpriv, '--pdeathsig', 'SIGTERM', '--', ...command] : command;
  const child: ChildProcess = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-2_000)));
  const exited = new Promise<void>((resolve) => {
    child.once('error', (error) => {
      stderr += error.message;
      resolve();
    });
    child.once('exit', () => resolve());
  });
  const running = () => child.exitCode === null && child.signalCode === null;
  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      if (running()) {
        child.kill('SIGTERM');
        const hard = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(hard);
      }
      await fs.rm(dir, { recursive: true, force: true });
    })());
  try {
    for (const until = Date.now() + START_TIMEOUT_MS; !(await accepts(port)); await sleep(20)) {
      if (!running()) throw new Error(`plain ${kind} exited at start: ${stderr.trim() || 'no output'}`);
      if (Date.now() > until)
        throw new Error(`plain ${kind} did not listen within ${START_TIMEOUT_MS / 1000} s: ${stderr.trim()}`);
    }
  } catch (error) {
    await close();
    throw error;
  }
  return { origin: `http://127.0.0.1:${port}`, close };
}
