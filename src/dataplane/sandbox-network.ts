/**
 * User-mode networking for a sandbox's own network namespace, with slirp4netns (Debian package
 * `slirp4netns`): the namespace gets a `tap0` device whose traffic slirp4netns, running outside, turns
 * into ordinary sockets of the host. So an app has egress (model APIs, package registries), while
 * `--disable-host-loopback` keeps the host's loopback services (the service's API, its PostgreSQL, the
 * machine's Redis, other apps' published ports) out of reach: the namespace's 127.0.0.1 is its own.
 *
 * Inbound traffic comes in only through a port forward of slirp4netns's API (`add_hostfwd`): a port on
 * the host's 127.0.0.1 that leads to the same port of the app in its namespace, where the router sends
 * requests. slirp4netns itself runs with its own sandbox and seccomp filter, and exits when the service
 * does (its exit fd is a pipe whose other end only the service holds).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';

export interface SlirpOptions {
  /** The slirp4netns binary. */
  binary: string;
  /** A directory only the service can enter, for the API sockets (short: socket paths are limited). */
  socketDir: string;
  /**
   * How to start what carries the apps' traffic so that it runs outside the service's CPU reserve
   * (src/dataplane/service-cpu-reserve.ts); as it is when there is none.
   */
  ordinary?: (argv: readonly string[]) => string[];
}

export interface NetworkAttachment {
  /** Stops slirp4netns: the namespace is left with no way out. */
  close(): Promise<void>;
}

export class NetworkSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NetworkSetupError';
  }
}

let counter = 0;

/** One request of slirp4netns's JSON API: a connection each, answered with `return` or `error`. */
async function apiRequest(socketPath: string, request: unknown): Promise<unknown> {
  const socket = net.createConnection(socketPath);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  await once(socket, 'connect');
  socket.end(JSON.stringify(request));
  await once(socket, 'close');
  const answer = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { return?: unknown; error?: { desc?: string } };
  if (answer.error) throw new NetworkSetupError(`slirp4netns refused ${JSON.stringify(request)}: ${answer.error.desc}`);
  return answer.return;
}

async function waitReady(child: ChildProcess, stderr: () => string, timeoutMs: number): Promise<void> {
  const ready = child.stdio[3] as NodeJS.ReadableStream;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => done(new NetworkSetupError(`slirp4netns was not ready within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const done = (error?: Error) => {
      clearTimeout(timer);
      ready.removeAllListeners('data');
      child.removeListener('exit', onExit);
      if (error) reject(error);
      else resolve();
    };
    const onExit = (code: number | null) =>
      done(new EarlyExit(`slirp4netns exited (code ${code}) before it was ready: ${stderr().trim()}`));
    ready.once('data', () => done());
    child.once('exit', onExit);
  });
}

/**
 * bubblewrap sets up the namespace's loopback after it reports the sandbox's pid and before it blocks;
 * slirp4netns configuring the namespace at the same time makes either fail now and then
 * (`loopback: Failed RTM_NEWADDR`). The loopback address in the namespace's routing table says it is done.
 */
async function waitForLoopback(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const table = await fs.readFile(`/proc/${pid}/net/fib_trie`, 'utf8').catch(() => null);
    if (table === null) throw new NetworkSetupError('the sandbox exited before its network was set up');
    if (table.includes('127.0.0.1')) return;
    if (Date.now() > deadline) throw new NetworkSetupError(`the sandbox's loopback was not up within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/**
 * Gives the network namespace of `pid` a way out through slirp4netns, and publishes `publishPort` (the
 * same port on the host's 127.0.0.1 and in the namespace) when given.
 */
export async function attachNetwork(
  options: SlirpOptions,
  pid: number,
  publishPort: number | null,
  onRetry: (reason: string) => void = () => undefined,
): Promise<NetworkAttachment> {
  await waitForLoopback(pid, 10_000);
  // As an ordinary user slirp4netns now and then exits before it is ready, right after its child sent the
  // tap device (`sent tapfd=7 for tap0`, exit 1; about one start in a few hundred under load). Its tap
  // device goes with it, so a second one starts clean: tried up to ATTACH_TRIES times, each retry said.
  for (let attempt = 1; ; attempt++) {
    try {
      return await attachOnce(options, pid, publishPort);
    } catch (error) {
      if (!(error instanceof EarlyExit) || attempt >= ATTACH_TRIES) throw error;
      onRetry(`${error.message}; trying again (${attempt + 1} of ${ATTACH_TRIES})`);
    }
  }
}

const ATTACH_TRIES = 3;

/** slirp4netns ended before it said it was ready. */
class EarlyExit extends NetworkSetupError {}

async function attachOnce(options: SlirpOptions, pid: number, publishPort: number | null): Promise<NetworkAttachment> {
  counter += 1;
  const apiSocket = path.join(options.socketDir, `s${process.pid}-${counter}.sock`);
  // At ordinary priority: it carries the app's traffic (docs/performance.md, the idle class it left).
  const argv = [
    options.binary,
    '--configure',
    '--mtu=65520',
    '--disable-host-loopback',
    '--enable-sandbox',
    '--enable-seccomp',
    '--ready-fd=3',
    '--exit-fd=4',
    `--api-socket=${apiSocket}`,
    // As root it joins the network namespace only: the sandbox's processes are in a user namespace
    // nested in the one that owns it (bubblewrap's --disable-userns), which root needs no entry to. As an
    // ordinary user it joins the user namespace of the pid, where it is root (sandbox-user-mapping.ts).
    ...(process.getuid?.() === 0 ? ['--netns-type=path', `/proc/${pid}/ns/net`] : [String(pid)]),
    'tap0',
  ];
  const command = options.ordinary ? options.ordinary(argv) : argv;
  const child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-2_000);
  });
  // Its exit fd: closed by our side on close(), and by the kernel when the service dies.
  const exitPipe = child.stdio[4] as net.Socket;
  exitPipe.on('error', () => {
    // The other end went away: slirp4netns has exited, which `exited` reports.
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const close = async () => {
    exitPipe.destroy();
    const timer = setTimeout(() => child.kill('SIGKILL'), 2_000);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    clearTimeout(timer);
  };
  try {
    await waitReady(child, () => stderr, 10_000);
    if (publishPort !== null) {
      await apiRequest(apiSocket, {
        execute: 'add_hostfwd',
        arguments: { proto: 'tcp', host_addr: '127.0.0.1', host_port: publishPort, guest_port: publishPort },
      });
    }
  } catch (error) {
    await close();
    throw error instanceof NetworkSetupError ? error : new NetworkSetupError(String(error));
  }
  return { close };
}
