/**
 * Whose X-Forwarded-For the API believes (SLIPWAY_TRUSTED_PROXIES): Fastify's `trustProxy` over Node's
 * BlockList. A request from a trusted proxy has the client address the proxy names as `request.ip`; any
 * other peer's header is its own claim and ignored, its TCP address counts. With none trusted (the
 * default) every header is ignored. A connection without an address (an app's, through its own socket)
 * trusts nothing.
 */
import net from 'node:net';

export type TrustProxy = false | ((address: string | undefined, hop: number) => boolean);

export function trustProxyOption(trusted: readonly string[]): TrustProxy {
  if (trusted.length === 0) return false;
  const list = new net.BlockList();
  for (const entry of trusted) {
    const [address, prefix] = entry.split('/') as [string, string | undefined];
    const type = net.isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return (address) => {
    if (address === undefined) return false;
    // An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d.
    const plain = address.startsWith('::ffff:') && net.isIPv4(address.slice(7)) ? address.slice(7) : address;
    const type = net.isIP(plain) === 6 ? 'ipv6' : net.isIP(plain) === 4 ? 'ipv4' : null;
    return type !== null && list.check(plain, type);
  };
}
