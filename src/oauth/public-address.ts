/**
 * Where a URL that Slipway discovers from someone else's document may lead (an MCP server's protected-
 * resource metadata, its authorization server's metadata): not the service's own host or network. A
 * host that is, or resolves to, a loopback, private, link-local, unspecified or CGNAT address is
 * refused. The name is resolved again when the request is made, so DNS rebinding between the two is not
 * caught (docs/oauth.md).
 */
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { OAuthFlowError, unreachableError } from './oauth-flow-error.ts';

/** Addresses no discovered URL may point at: loopback, private, link-local, unspecified, CGNAT. */
const NOT_PUBLIC = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
] as const)
  NOT_PUBLIC.addSubnet(network, prefix, 'ipv4');
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
] as const)
  NOT_PUBLIC.addSubnet(network, prefix, 'ipv6');

/** Throws a `configuration` OAuthFlowError naming `field` when `url`'s host is not a public address. */
export async function assertPublicAddress(field: string, url: URL): Promise<void> {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  let addresses: string[];
  try {
    addresses = isIP(host) ? [host] : (await lookup(host, { all: true })).map((entry) => entry.address);
  } catch (err) {
    throw unreachableError(url.href, err);
  }
  // An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is checked as the IPv4 address it is.
  const unmapped = addresses.map((address) => address.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/i, '$1'));
  if (unmapped.some((address) => NOT_PUBLIC.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4')))
    throw new OAuthFlowError(
      'configuration',
      `${field} (${url.host}) is a loopback, private or link-local address (accepted only in insecure development mode, SLIPWAY_ALLOW_INSECURE_OAUTH=1)`,
    );
}
