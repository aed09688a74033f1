/**
 * The connection half of public-address.ts's rule: an undici dispatcher that connects to public
 * addresses only. A module of its own because undici (about a megabyte of code) is loaded only by the
 * requests that use it: a service that never discovers an OAuth provider never compiles it.
 */
import type { LookupAddress, LookupAllOptions, LookupOneOptions } from 'node:dns';
import { isIP } from 'node:net';
import { Agent, buildConnector, fetch as undiciFetch, type RequestInit as UndiciRequestInit } from 'undici';
import { isPublicAddress, NotPublicAddressError, systemResolve, type ResolveAddresses } from './public-address.ts';

type LookupCallback = (err: Error | null, address: string | LookupAddress[], family?: number) => void;

/**
 * An undici dispatcher whose connections go to public addresses only: a literal host is checked as it
 * is; a name is resolved with `resolve`, refused when any of its addresses is not public, and the socket
 * connects to those same addresses (net's `lookup` hook, so nothing resolves the name again).
 */
export function publicOnlyDispatcher(
  resolve: ResolveAddresses = systemResolve,
  connectTimeoutMs = 10_000,
  /** Which addresses may be connected to; only tests, which have no public server, give another. */
  allowed: (address: string) => boolean = isPublicAddress,
): Agent {
  const checkedLookup = (hostname: string, options: LookupOneOptions | LookupAllOptions, callback: LookupCallback) => {
    resolve(hostname).then(
      (entries) => {
        const refused = entries.find((entry) => !allowed(entry.address));
        if (refused || entries.length === 0)
          return callback(new NotPublicAddressError(hostname, refused?.address ?? 'nothing'), []);
        const wanted = options.family === 4 || options.family === 6 ? options.family : 0;
        const usable = wanted ? entries.filter((entry) => entry.family === wanted) : entries;
        if (usable.length === 0) {
          const err = Object.assign(new Error(`${hostname} has no IPv${wanted} address`), { code: 'ENOTFOUND' });
          return callback(err, []);
        }
        if (options.all) return callback(null, usable);
        return callback(null, usable[0]!.address, usable[0]!.family);
      },
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err)), []),
    );
  };
  const connector = buildConnector({ timeout: connectTimeoutMs, lookup: checkedLookup });
  return new Agent({
    connect: (options, callback) => {
      const host = options.hostname.replace(/^\[|\]$/g, '');
      // net.connect does not look up a literal address, so it is checked here.
      if (isIP(host) && !allowed(host)) return callback(new NotPublicAddressError(host, host), null);
      return connector(options, callback);
    },
  });
}

/** Requests through one public-only dispatcher, made when first needed (OAuthTransport's). */
export class PublicOnlyFetch {
  readonly #dispatcher: Agent;

  constructor(resolve: ResolveAddresses, connectTimeoutMs: number) {
    this.#dispatcher = publicOnlyDispatcher(resolve, connectTimeoutMs);
  }

  async fetch(url: string, init: RequestInit): Promise<Response> {
    const response = await undiciFetch(url, { ...(init as UndiciRequestInit), dispatcher: this.#dispatcher });
    // undici's own Response class: oauth4webapi accepts it (it checks the class by its tag).
    return response as unknown as Response;
  }
}
