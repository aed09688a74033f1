/**
 * The HAProxy configuration of the app edge (src/dataplane/edge-haproxy.ts). Pure: the same input gives
 * the same text.
 *
 * Layout: one frontend on the apps port; a map file from host name to backend; a pool of backends that
 * apps are given one each, holding the app's instances as servers. Route changes go through HAProxy's
 * runtime API (servers added, drained, deleted; map entries set) without a reload, so no client
 * connection is ever closed by a switch. The configuration is rendered with the whole current table
 * (servers and map) whenever HAProxy is (re)started, so a restart comes back with every route.
 *
 * What every app request gets, whichever app (docs/app-urls.md, "What the app receives"):
 * - streaming both ways (HAProxy forwards as it receives), WebSocket upgrades (tunnels), keep-alive
 *   connections to the instances;
 * - the X-Forwarded-* headers this service owns (Proto and Host set here; For appended), never a
 *   client's X-Forwarded-Prefix or -Port;
 * - none of the service's credentials: an `X-Api-Key` or `Authorization` holding a key, listener or agent
 *   credential of this service (`slw_`, `slwl_`, `slwa_`) is removed before the request leaves, and so
 *   are the service's own cookies (`slipway_...`: the dashboard's sign-in session);
 * - responses cannot widen an app's reach: `Service-Worker-Allowed` is dropped;
 * - the edge's own answers (no instance, unknown host, an instance that does not answer) are JSON in the
 *   API's error shape with a request id (the client's own when it sent a sane one).
 */
import { CREDENTIAL_PREFIXES } from '../auth/credentials.ts';
import { NO_INSTANCE_YET, SCALED_TO_ZERO, type AppTarget } from './app-backends.ts';
import { THREAD_PINS } from './split-choice.ts';

/** One instance as a server of its app's backend: a slot (`slot<n>`), or a server added at run time. */
export interface EdgeServer {
  name: string;
  port: number;
}

export interface EdgeRoute {
  slug: string;
  /** The pool backend the app has, `app_<n>`. */
  backend: string;
  servers: readonly EdgeServer[];
}

export interface HaproxyConfigInput {
  /** The edge's own directory: pid file, runtime socket, map file. */
  dir: string;
  listenHost: string;
  listenPort: number;
  /** X-Forwarded-Proto for apps: `https` when the edge or a proxy in front of it terminates TLS. */
  forwardedProto: 'http' | 'https';
  /** One PEM file with the certificate chain and the key, when the edge serves HTTPS. */
  tlsPemFile: string | null;
  /** Backends in the pool: apps beyond it make the edge restart with a bigger one. */
  poolSize: number;
  /** Server slots declared in each backend (instances beyond them are added at run time). */
  slots: number;
  /** HAProxy's threads (`nbthread`). */
  threads: number;
  /**
   * Connections one client address (an IPv6 /64) may hold at once; more are closed as they come. Null
   * when a proxy in front of the edge is every client's address.
   */
  perClientConnections?: number | null;
  /** The size of the stick table of thread pins (THREAD_PINS unless a test asks for fewer). */
  threadPins?: number;
  /** `user`/`group` for HAProxy once it has bound its sockets, when started as root; null otherwise. */
  runAs: { user: string; group: string } | null;
  routes: readonly EdgeRoute[];
  /** Where each request's line goes, and its format (src/dataplane/edge-request-log.ts); none when absent. */
  requestLog?: { address: string; format: string } | null;
}

/**
 * The name of a slot. Instances go into slots declared in the configuration, whose address the runtime
 * API sets: HAProxy 2.6 reuses connections to those, but opens a new connection for every request to a
 * server added at run time (`add server`), which costs a third to half of the throughput.
 */
export function slotName(index: number): string {
  return `slot${index}`;
}

/** The name of a server added at run time for an instance beyond the slots. */
export function extraServerName(target: AppTarget): string {
  return `p${target.port}`;
}

export function poolBackend(index: number): string {
  return `app_${index}`;
}

/** The map line of an app: its host name and its backend. */
export function mapLine(slug: string, appsDomain: string, backend: string): string {
  return `${slug}.${appsDomain} ${backend}`;
}

function bindAddress(host: string, port: number): string {
  if (host === '0.0.0.0' || host === '*') return `:${port}`;
  if (host === '::') return `:::${port} v4v6`;
  if (host.includes(':')) return `${host.replace(/^\[|\]$/g, '')}:${port}`;
  return `${host}:${port}`;
}

/** A JSON answer in the API's error shape; `%[var(txn.slug)]` names the app. */
function answer(status: number, code: string, detail: string): string {
  const body = JSON.stringify({ detail, code }).replace(/'/g, "\\'");
  return `status ${status} content-type application/json lf-string '${body}' hdr x-request-id %[var(txn.rid)]`;
}

/**
 * A header value that holds a credential of this service, of any kind in src/auth/credentials.ts (a key
 * `slw_`, a listener's `slwl_`, an agent's `slwa_`, the metrics token `slwm_`), bare or after an auth
 * scheme (`Bearer slw_...`); matched without regard to case. Both edges remove such headers (the
 * built-in one in src/dataplane/app-proxy.ts).
 */
export const SERVICE_CREDENTIAL_PATTERN = String.raw`^\s*([a-z]+\s+)?(${Object.values(CREDENTIAL_PREFIXES).join('|')})`;
const CREDENTIAL = SERVICE_CREDENTIAL_PATTERN;

/**
 * The name of a cookie of this service (the dashboard's sign-in session and state, and any later one):
 * `slipway_...`, bare or with a `__Host-`/`__Secure-` prefix. Both edges remove such cookies from the
 * Cookie header before a request reaches an app, and keep the app's own cookies (the built-in edge in
 * src/dataplane/app-proxy.ts).
 */
export const SERVICE_COOKIE_NAME_PATTERN = String.raw`(?:__Host-|__Secure-)?slipway_`;
/** Removals of one service cookie each before the Cookie header is dropped whole (a browser sends at most 4). */
const COOKIE_PASSES = 4;

function cookieRules(): string[] {
  // Whether the request came with one, kept in a variable: the rules below change the header.
  const has = '{ var(txn.svc_cookie) -m bool }';
  const one = String.raw`^(|.*?;)\s*${SERVICE_COOKIE_NAME_PATTERN}[^=;]*=[^;]*;?\s*(.*)$`;
  return [
    '  http-request set-var(txn.svc_cookie) bool(true) if { req.hdr(cookie) -m sub slipway_ }',
    ...Array.from(
      { length: COOKIE_PASSES },
      () => String.raw`  http-request replace-header Cookie '${one}' '\1 \2' if ${has}`,
    ),
    String.raw`  http-request replace-header Cookie '^\s*(.*?)[\s;]*$' '\1' if ${has}`,
    // More of them than a browser sends: the whole header goes (fail closed).
    String.raw`  http-request del-header Cookie if { req.hdr(cookie) -m reg '(^|;)\s*${SERVICE_COOKIE_NAME_PATTERN}' }`,
    '  http-request del-header Cookie if { req.hdr(cookie) -m len 0 }',
  ];
}

/**
 * Traffic splits (docs/app-urls.md, "Traffic split"), in HAProxy's own terms. A split host has an entry in
 * split.map: `<backend of the second revision>:<weight>:<base revision>:<second revision>`. The side
 * (1: the host's own backend, 2: the split's) is chosen by, later rules winning: `rand(100)` against the
 * weight, or for a LangGraph thread (`/threads/<id>/...`, an id of at most 128 characters as the built-in
 * edge takes it) the xxh32 hash of its id against the weight; the `slipway_split` cookie naming a
 * revision; the `X-Slipway-Sticky` header's xxh32 hash against the weight; and the thread's pin in a stick
 * table (gpt0 = the side that first served it, keyed by both revisions and the thread, so a pin lasts as
 * long as that split; a full table forgets the entries nearest their expiry, the least recently used).
 * The thread's hash makes a forgotten pin harmless while the weight is the same: the thread is placed
 * again where it was (src/dataplane/split-choice.ts says the same of the built-in edge). The response names
 * the revision in the cookie when the request's cookie did not.
 */
export const SPLIT_COOKIE_NAME = 'slipway_split';
export const SPLIT_THREADS_TABLE = 'split_threads';

function splitRules(dir: string): string[] {
  const split = '{ var(txn.split) -m found }';
  return [
    `  http-request set-var(txn.split) var(txn.host),map(${dir}/split.map) if { var(txn.backend) -m found }`,
    `  http-request set-var(txn.sb) var(txn.split),field(1,:) if ${split}`,
    `  http-request set-var(txn.sw) var(txn.split),field(2,:) if ${split}`,
    `  http-request set-var(txn.ra) var(txn.split),field(3,:) if ${split}`,
    `  http-request set-var(txn.rb) var(txn.split),field(4,:) if ${split}`,
    `  http-request set-var(txn.side) int(1) if ${split}`,
    `  http-request set-var(txn.side) int(2) if ${split} { rand(100),sub(txn.sw) -m int lt 0 }`,
    `  http-request set-var(txn.th) path,field(3,/) if ${split} { path_reg ^/threads/[^/]{1,128}(/|$) }`,
    '  http-request set-var(txn.side) int(1) if { var(txn.th) -m found }',
    '  http-request set-var(txn.side) int(2) if { var(txn.th) -m found } { var(txn.th),xxh32,mod(100),sub(txn.sw) -m int lt 0 }',
    `  http-request set-var(txn.ck) req.cook(${SPLIT_COOKIE_NAME}) if ${split}`,
    '  http-request set-var(txn.side) int(1) if { var(txn.ck),strcmp(txn.ra) eq 0 }',
    '  http-request set-var(txn.side) int(2) if { var(txn.ck),strcmp(txn.rb) eq 0 }',
    `  http-request set-var(txn.side) int(1) if ${split} { req.fhdr(x-slipway-sticky) -m found }`,
    `  http-request set-var(txn.side) int(2) if ${split} { req.fhdr(x-slipway-sticky) -m found } { req.fhdr(x-slipway-sticky),xxh32,mod(100),sub(txn.sw) -m int lt 0 }`,
    // Revisions first: a key is never cut short of them (the table's `len` holds two UUIDs and 128 characters).
    '  http-request set-var(txn.tk) var(txn.ra),concat(@,txn.rb,),concat(@,txn.th,) if { var(txn.th) -m found }',
    `  http-request track-sc1 var(txn.tk) table ${SPLIT_THREADS_TABLE} if { var(txn.tk) -m found }`,
    '  http-request set-var(txn.side) sc1_get_gpt0 if { var(txn.tk) -m found } { sc1_get_gpt0 gt 0 }',
    '  http-request sc-set-gpt0(1) var(txn.side) if { var(txn.tk) -m found } { sc1_get_gpt0 eq 0 }',
    '  http-request set-var(txn.backend) var(txn.sb) if { var(txn.side) -m int eq 2 }',
    '  http-request set-var(txn.rev) var(txn.ra) if { var(txn.side) -m int eq 1 }',
    '  http-request set-var(txn.rev) var(txn.rb) if { var(txn.side) -m int eq 2 }',
    `  http-response add-header Set-Cookie "${SPLIT_COOKIE_NAME}=%[var(txn.rev)]; Path=/; HttpOnly; SameSite=Lax" if { var(txn.rev) -m found } !{ var(txn.rev),strcmp(txn.ck) eq 0 }`,
  ];
}

export function renderHaproxyConfig(input: HaproxyConfigInput): string {
  const byBackend = new Map(input.routes.map((r) => [r.backend, r]));
  const lines = [
    '# Written by Slipway when it (re)starts HAProxy; routes change through the runtime API. Edits are lost.',
    'global',
    `  pidfile ${input.dir}/haproxy.pid`,
    `  stats socket ${input.dir}/admin.sock mode 600 level admin`,
    '  stats timeout 10s',
    `  nbthread ${input.threads}`,
    // No maxconn: HAProxy derives it from the file descriptors it may open.
    ...(input.runAs ? [`  user ${input.runAs.user}`, `  group ${input.runAs.group}`] : []),
    '  log stderr format raw local0 warning',
    '',
    'defaults',
    '  mode http',
    '  log global',
    '  option dontlognull',
    '  timeout connect 5s',
    // A request's head must arrive in time (slow clients hold no slot for long); bodies and answers may
    // stream for long (SSE, long polls), WebSockets too.
    '  timeout http-request 30s',
    '  timeout http-keep-alive 75s',
    '  timeout client 1h',
    '  timeout server 1h',
    '  timeout tunnel 1h',
    '  timeout client-fin 5s',
    '  timeout server-fin 5s',
    // A refused connection goes to another instance; the app cannot have seen the request. One retry:
    // HAProxy waits up to a second before each, and a dead single instance should get its 502 soon.
    '  retries 1',
    '  option redispatch 1',
    '  option forwardfor',
    // A client that goes away ends the app's request at once, also on a quiet stream (SSE, long poll),
    // as the built-in edge does.
    '  option abortonclose',
    // Each piece of a response goes out as the app writes it (SSE, streamed tokens), rather than merged
    // with the next one while HAProxy expects more.
    '  option http-no-delay',
    '',
    'frontend apps',
    `  bind ${bindAddress(input.listenHost, input.listenPort)}${input.tlsPemFile ? ` ssl crt ${input.tlsPemFile} alpn http/1.1` : ''}`,
    // One datagram per request to the service, for the latency percentiles per revision (a send never waits).
    ...(input.requestLog
      ? [
          `  log ${input.requestLog.address} len 256 format raw local0 info`,
          `  log-format "${input.requestLog.format}"`,
        ]
      : []),
    // One client cannot hold the edge's connections (HAProxy's maxconn, derived from its file descriptors):
    // past its share, its new connections are closed before they take a slot.
    ...(input.perClientConnections === null || input.perClientConnections === undefined
      ? []
      : [
          '  stick-table type ipv6 size 100k expire 60s store conn_cur',
          '  tcp-request connection track-sc0 src,ipmask(32,64)',
          `  tcp-request connection reject if { sc0_conn_cur gt ${input.perClientConnections} }`,
        ]),
    '  http-request set-var(txn.rid) uuid()',
    String.raw`  http-request set-var(txn.rid) req.hdr(x-request-id) if { req.hdr(x-request-id) -m reg ^[\x21-\x7e]{1,200}$ }`,
    // The whole Host header (fhdr, not hdr, which splits at commas): `Host: a.localhost, b.localhost` names
    // no app, rather than the last of its parts (a front proxy checking Host would have seen neither).
    '  http-request set-var(txn.host) req.fhdr(host),field(1,:),lower,regsub(\\.$,)',
    '  http-request set-var(txn.slug) var(txn.host),field(1,.)',
    `  http-request set-var(txn.backend) var(txn.host),map(${input.dir}/routes.map)`,
    // Before the service's cookies are removed: the split's cookie is one of them.
    ...splitRules(input.dir),
    // Only WebSocket upgrades go through: an app asked to switch to h2c (`curl --http2`) may refuse the
    // request (a WebSocket library answers 400), where the built-in edge serves it as a plain request.
    '  http-request del-header Upgrade unless { req.hdr(upgrade) -m str -i websocket }',
    '  http-request del-header HTTP2-Settings',
    '  http-request del-header X-Forwarded-Prefix',
    '  http-request del-header X-Forwarded-Port',
    `  http-request set-header X-Forwarded-Proto ${input.forwardedProto}`,
    '  http-request set-header X-Forwarded-Host %[req.fhdr(host)] if { req.hdr(host) -m found }',
    '  http-request del-header X-Forwarded-Host unless { req.hdr(host) -m found }',
    `  http-request del-header X-Api-Key if { req.hdr(x-api-key) -m reg -i '${CREDENTIAL}' }`,
    `  http-request del-header Authorization if { req.hdr(authorization) -m reg -i '${CREDENTIAL}' }`,
    ...cookieRules(),
    '  http-response del-header Service-Worker-Allowed',
    '  use_backend %[var(txn.backend)] if { var(txn.backend) -m found }',
    '  default_backend slipway_unknown',
    '',
    `backend ${SPLIT_THREADS_TABLE}`,
    // The LangGraph threads of traffic splits: which side first served each (per HAProxy process).
    `  stick-table type string len 204 size ${input.threadPins ?? THREAD_PINS} expire 24h store gpt0`,
    '',
    'backend slipway_unknown',
    `  http-request return ${answer(404, 'not_found', 'No deployment is served at this host name.')}`,
  ];
  for (let i = 0; i < input.poolSize; i++) {
    const name = poolBackend(i);
    const route = byBackend.get(name);
    lines.push(
      '',
      `backend ${name}`,
      '  balance roundrobin',
      // HAProxy answers 503 both when a backend has no server and when none accepted the connection: the
      // second is the instances' failure (502, like the built-in edge), told apart by the servers it has.
      `  http-request set-var(txn.code) str(bad_gateway) if { nbsrv gt 0 }`,
      `  http-request set-var(txn.code) str(unavailable) if { nbsrv eq 0 }`,
      `  http-request set-var(txn.why) "str(did not answer: none of its instances accepted the connection)" if { nbsrv gt 0 }`,
      `  http-request set-var(txn.why) "str(${NO_INSTANCE_YET})" if { nbsrv eq 0 }`,
      // A paused deployment (resource_spec.min_scale 0) has no server on purpose: its host is in paused.map.
      `  http-request set-var(txn.why) "str(${SCALED_TO_ZERO})" if { nbsrv eq 0 } { var(txn.host),map(${input.dir}/paused.map) -m found }`,
      `  http-error ${answer(502, 'bad_gateway', 'Deployment %[var(txn.slug)] did not answer.')}`,
      `  http-error status 503 content-type application/json lf-string '{"detail":"Deployment %[var(txn.slug)] %[var(txn.why)].","code":"%[var(txn.code)]"}' hdr x-request-id %[var(txn.rid)] hdr x-slipway-edge 1`,
      `  http-error ${answer(504, 'bad_gateway', 'Deployment %[var(txn.slug)] did not answer in time.')}`,
      '  http-after-response set-status 502 if { status 503 } { res.hdr(x-slipway-edge) -m found } { nbsrv gt 0 }',
      '  http-after-response del-header x-slipway-edge',
      ...Array.from({ length: input.slots }, (_, k) => {
        const taken = route?.servers.find((server) => server.name === slotName(k));
        // A free slot waits in maintenance, at a placeholder address, for the runtime API to fill it.
        return taken
          ? `  server ${slotName(k)} 127.0.0.1:${taken.port}`
          : `  server ${slotName(k)} 127.0.0.1:1 disabled`;
      }),
      ...(route?.servers ?? [])
        .filter((server) => !server.name.startsWith('slot'))
        .map((server) => `  server ${server.name} 127.0.0.1:${server.port}`),
    );
  }
  return `${lines.join('\n')}\n`;
}
