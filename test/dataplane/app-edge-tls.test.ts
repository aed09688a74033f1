/**
 * HTTPS for apps: with a certificate and key for the apps domain, each edge (HAProxy, and the built-in
 * one) serves the apps port over TLS only, hands out https URLs, and tells apps `X-Forwarded-Proto: https`.
 * The certificate is a self-signed wildcard made here with openssl. And the configuration HAProxy is
 * started with is one HAProxy itself accepts (`haproxy -c`), with routes and TLS.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { promisify } from 'node:util';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { renderHaproxyConfig } from '../../src/dataplane/edge-haproxy-config.ts';
import { findExecutable } from '../../src/dataplane/executables.ts';
import { createLogger } from '../../src/logger.ts';

const run = promisify(execFile);
let dir: string;
let certFile: string;
let keyFile: string;
let app: http.Server;
let appPort: number;

before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-tls-'));
  certFile = path.join(dir, 'apps.crt');
  keyFile = path.join(dir, 'apps.key');
  await run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=*.apps.test',
    '-addext',
    'subjectAltName=DNS:*.apps.test',
    '-keyout',
    keyFile,
    '-out',
    certFile,
  ]);
  app = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ proto: req.headers['x-forwarded-proto'], host: req.headers.host }));
  });
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
  appPort = (app.address() as AddressInfo).port;
});

after(async () => {
  app.closeAllConnections();
  await new Promise<void>((resolve) => app.close(() => resolve()));
  await fs.rm(dir, { recursive: true, force: true });
});

function httpsGet(port: number, host: string): Promise<{ status: number; body: string; cert: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      {
        host: '127.0.0.1',
        port,
        path: '/',
        servername: host.split(':')[0],
        headers: { host },
        rejectUnauthorized: false,
      },
      (res) => {
        let body = '';
        const peer = (res.socket as TLSSocket).getPeerCertificate();
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, cert: String(peer.subject?.CN ?? '') }));
      },
    );
    req.on('error', reject);
  });
}

function plainGet(port: number, host: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
  });
}

const haproxy = await findExecutable('haproxy');
for (const kind of ['haproxy', 'builtin'] as const) {
  describe(
    `HTTPS on the ${kind} edge`,
    { skip: kind === 'haproxy' && haproxy === null ? 'HAProxy is not installed' : false },
    () => {
      let edge: AppEdge;
      before(async () => {
        edge = await startAppEdge({
          config: {
            dataDir: path.join(dir, kind),
            appsDomain: 'apps.test',
            appsHost: '127.0.0.1',
            appsPort: 0,
            appsPublicUrl: null,
            appsTls: { certFile, keyFile },
            edgeProxy: kind,
            drainTimeoutMs: 1_000,
          },
          logger: createLogger('silent'),
        });
        await edge.setTargets('secure-0000000a', [{ instanceId: 'i-1', port: appPort }]);
      });
      after(async () => edge.close());

      test("the app answers over TLS with the operator's certificate, and learns it was https", async () => {
        assert.equal(edge.kind, kind);
        assert.equal(edge.publicUrl, `https://apps.test:${edge.port}`);
        const host = `secure-0000000a.apps.test:${edge.port}`;
        const answer = await httpsGet(edge.port, host);
        assert.equal(answer.status, 200, answer.body);
        assert.equal(answer.cert, '*.apps.test');
        assert.deepEqual(JSON.parse(answer.body), { proto: 'https', host });
      });

      test('plain HTTP on the apps port gets no app', async () => {
        const status = await plainGet(edge.port, `secure-0000000a.apps.test:${edge.port}`);
        assert.notEqual(status, 200);
      });
    },
  );
}

test('a missing certificate file stops the edge from starting, naming the file', async () => {
  await assert.rejects(
    startAppEdge({
      config: {
        dataDir: path.join(dir, 'missing'),
        appsDomain: 'apps.test',
        appsHost: '127.0.0.1',
        appsPort: 0,
        appsPublicUrl: null,
        appsTls: { certFile: path.join(dir, 'nope.crt'), keyFile },
        edgeProxy: 'builtin',
        drainTimeoutMs: 1_000,
      },
      logger: createLogger('silent'),
    }),
    /nope\.crt/,
  );
});

test('the HAProxy configuration with routes and TLS is one HAProxy accepts', { skip: haproxy === null }, async () => {
  const pem = path.join(dir, 'check.pem');
  await fs.writeFile(pem, (await fs.readFile(certFile, 'utf8')) + (await fs.readFile(keyFile, 'utf8')));
  await fs.writeFile(path.join(dir, 'routes.map'), '');
  // The edge writes its maps before HAProxy reads its configuration (the paused one names paused apps,
  // the split one the traffic splits).
  await fs.writeFile(path.join(dir, 'paused.map'), '');
  await fs.writeFile(path.join(dir, 'split.map'), '');
  const config = path.join(dir, 'check.cfg');
  await fs.writeFile(
    config,
    renderHaproxyConfig({
      dir,
      listenHost: '0.0.0.0',
      listenPort: 8443,
      forwardedProto: 'https',
      tlsPemFile: pem,
      poolSize: 4,
      slots: 4,
      threads: 2,
      runAs: null,
      routes: [
        { slug: 'one-0000000a', backend: 'app_0', servers: [{ name: 'slot0', port: 40001 }] },
        {
          slug: 'two-0000000b',
          backend: 'app_2',
          servers: [
            { name: 'slot0', port: 40002 },
            { name: 'slot3', port: 40003 },
            { name: 'p40004', port: 40004 },
          ],
        },
      ],
    }),
  );
  const checked = await run(haproxy!, ['-c', '-f', config]).catch((error: Error & { stderr?: string }) => ({
    stdout: '',
    stderr: error.stderr ?? error.message,
    failed: true,
  }));
  assert.ok(!('failed' in checked), checked.stderr);
});
