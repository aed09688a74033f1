/**
 * Where a URL that Slipway discovers from someone else's document may lead (an MCP server's protected-
 * resource metadata, its authorization server's metadata, the endpoints named there): not the service's
 * own host or network. An address is public when it is a globally reachable unicast address; refused are
 * loopback, private (RFC 1918), unique-local, link-local, unspecified, CGNAT, multicast, broadcast and
 * reserved addresses, the documentation and benchmarking ranges, and an IPv6 address that wraps one of
 * those IPv4 addresses (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`).
 *
 * Two checks, one rule:
 * - `assertPublicAddress` before a request: the URL's host, or every address its name resolves to.
 * - `publicOnlyDispatcher` (public-only-dispatcher.ts) for the request itself: the connection resolves
 *   the name, refuses when any address is not public, and connects to the very addresses it checked. A
 *   name that resolves to a public address for the first check and a private one for the connection
 *   (DNS rebinding) is refused.
 * Both resolve through one `ResolveAddresses` function, replaceable in tests.
 *
 * OAuthClient makes both for each request of a discovery, and the one on the connection for the token,
 * revocation and userinfo requests of an MCP provider (its endpoints came from discovery); insecure
 * development mode (SLIPWAY_ALLOW_INSECURE_OAUTH) lifts both. Redirects are never followed (oauth4webapi sends
 * `redirect: 'manual'`), so a 3xx is an answer, not a second address.
 *
 * What is not promised: a public address that forwards to a private one (someone else's proxy or NAT)
 * is out of reach of any address check; a caller that replaces the fetch (OAuthClient's `fetch`
 * option) gets only the first check; the URLs of other providers, which an admin types, are not
 * checked at all.
 */
import { lookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { OAuthFlowError, unreachableError } from './oauth-flow-error.ts';

/** Resolves a host name to all its addresses, as `dns.lookup(host, { all: true })` does. */
export type ResolveAddresses = (hostname: string) => Promise<LookupAddress[]>;

export const systemResolve: ResolveAddresses = (hostname) => lookup(hostname, { all: true, verbatim: true });

/** IPv4 addresses that are not globally reachable (IANA special-purpose registry, RFC 6890 and after). */
const NOT_PUBLIC_V4 = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], // "this network", 0.0.0.0 included
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // CGNAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking (and fake-IP DNS of some proxies)
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, 255.255.255.255 included
] as const)
  NOT_PUBLIC_V4.addSubnet(network, prefix, 'ipv4');

/** Inside 2000::/3 (the only global unicast IPv6 space), the ranges that are not globally reachable. */
const NOT_PUBLIC_V6 = new BlockList();
for (const [network, prefix] of [
  ['2001::', 23], // IETF protocol assignments: Teredo, benchmarking, ORCHID
  ['2001:db8::', 32], // documentation
  ['3fff::', 20], // documentation (RFC 9637)
] as const)
  NOT_PUBLIC_V6.addSubnet(network, prefix, 'ipv6');

/** The 16 bytes of an IPv6 address (given without brackets or zone), or null. */
function ipv6Bytes(address: string): number[] | null {
  let text = address;
  const tail: number[] = [];
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    if (isIP(dotted[1]!) !== 4) return null;
    tail.push(...dotted[1]!.split('.').map(Number));
    text = `${text.slice(0, -dotted[1]!.length)}0:0`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const groups = (part: string | undefined) => (part ? part.split(':') : []);
  const head = groups(halves[0]);
  const rest = groups(halves[1]);
  const missing = 8 - head.length - rest.length;
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...rest];
  const bytes = all.flatMap((group) => {
    const value = Number.parseInt(group, 16);
    return [value >> 8, value & 0xff];
  });
  if (tail.length === 4) bytes.splice(12, 4, ...tail);
  return bytes.length === 16 && bytes.every((byte) => Number.isInteger(byte)) ? bytes : null;
}

function hasPrefix(bytes: readonly number[], prefix: readonly number[]): boolean {
  return prefix.every((byte, index) => bytes[index] === byte);
}

/**
 * Whether `address` (an IP address, IPv6 without brackets; a zone is ignored) is a globally reachable
 * unicast address. Anything that is not an IP address is not public.
 */
export function isPublicAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const family = isIP(bare);
  if (family === 4) return !NOT_PUBLIC_V4.check(bare, 'ipv4');
  if (family !== 6) return false;
  const bytes = ipv6Bytes(bare.toLowerCase());
  if (!bytes) return false;
  // An IPv6 address that carries an IPv4 address is as public as that IPv4 address.
  const embedded = (offset: number) => bytes.slice(offset, offset + 4).join('.');
  if (hasPrefix(bytes, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])) return isPublicAddress(embedded(12));
  if (hasPrefix(bytes, [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0])) return isPublicAddress(embedded(12));
  if (hasPrefix(bytes, [0x20, 0x02])) return isPublicAddress(embedded(2));
  // Global unicast is 2000::/3; everything else (::, ::1, the IPv4-compatible ::/96, local-use NAT64
  // 64:ff9b:1::/48, discard 100::/64, fc00::/7, fe80::/10, fec0::/10, ff00::/8) is not public.
  if ((bytes[0]! & 0xe0) !== 0x20) return false;
  return !NOT_PUBLIC_V6.check(bare, 'ipv6');
}

/** A connection refused because the host is, or resolved to, an address that is not public. */
export class NotPublicAddressError extends Error {
  constructor(
    readonly host: string,
    readonly address: string,
  ) {
    super(`${host} is, or resolves to, ${address}, which is not a public address`);
    this.name = 'NotPublicAddressError';
  }
}

const REFUSED = 'a loopback, private or link-local address, or another address that is not public';
const INSECURE_MODE = 'accepted only in insecure development mode, SLIPWAY_ALLOW_INSECURE_OAUTH=1';

/**
 * The `configuration` OAuthFlowError for a refused host; `field` names the URL when known. The address a
 * name resolved to is not told: it would make this error an oracle for the service's internal DNS.
 */
export function notPublicError(field: string | null, host: string): OAuthFlowError {
  const what = field ? `${field} (${host})` : host;
  return new OAuthFlowError('configuration', `${what} is, or resolves to, ${REFUSED} (${INSECURE_MODE})`);
}

/** The NotPublicAddressError somewhere in `err`'s chain of causes (fetch wraps connection errors). */
export function findNotPublicAddress(err: unknown): NotPublicAddressError | null {
  for (let cause = err, depth = 0; cause instanceof Error && depth < 8; cause = cause.cause, depth++)
    if (cause instanceof NotPublicAddressError) return cause;
  return null;
}

function bareHost(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

/** Throws a `configuration` OAuthFlowError naming `field` when `url`'s host is not a public address. */
export async function assertPublicAddress(
  field: string,
  url: URL,
  resolve: ResolveAddresses = systemResolve,
): Promise<void> {
  const host = bareHost(url);
  let addresses: string[];
  try {
    addresses = isIP(host) ? [host] : (await resolve(host)).map((entry) => entry.address);
  } catch (err) {
    throw unreachableError(url.href, err);
  }
  const refused = addresses.find((address) => !isPublicAddress(address));
  if (refused !== undefined || addresses.length === 0) throw notPublicError(field, url.host);
}
