/**
 * How the OAuth client reaches a provider: oauth4webapi's request options (the fetch, the time limit,
 * the insecure development switch) and the checks on every URL it is given or discovers (https unless
 * insecure; for a discovered URL, a public address, checked before the request and on the connection
 * itself, public-address.ts). The flow (src/oauth/oauth-client.ts) and discovery and registration
 * (src/oauth/oauth-discovery.ts) share it.
 */
import * as oauth from 'oauth4webapi';
import { OAuthFlowError, unreachableError } from './oauth-flow-error.ts';
import type { PublicOnlyFetch } from './public-only-dispatcher.ts';
import {
  assertPublicAddress,
  findNotPublicAddress,
  notPublicError,
  systemResolve,
  type ResolveAddresses,
} from './public-address.ts';

export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

export interface OAuthTransportOptions {
  /**
   * Replaces fetch for every request (tests, proxies). The address check before a request to a
   * discovered URL stays; the check on the connection itself (public-address.ts) is then the fetch's.
   */
  fetch?: FetchLike;
  /**
   * Resolves host names for the address check of discovered URLs, both before the request and on its
   * connection. Default: the system resolver (dns.lookup). Tests replace it.
   */
  resolve?: ResolveAddresses;
  /** Permit plain http provider URLs. Development and tests only. */
  allowInsecure?: boolean;
  /** Time allowed for each request to the provider. Default 10 s. */
  timeoutMs?: number;
}

export class OAuthTransport {
  readonly #fetch: FetchLike | null;
  readonly #resolve: ResolveAddresses;
  #publicOnly: PublicOnlyFetch | null = null;
  readonly #allowInsecure: boolean;
  readonly #timeoutMs: number;

  constructor(options: OAuthTransportOptions = {}) {
    this.#fetch = options.fetch ?? null;
    this.#resolve = options.resolve ?? systemResolve;
    this.#allowInsecure = options.allowInsecure ?? false;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
  }

  /**
   * `publicOnly`: the URL was discovered (or is an endpoint of an MCP provider, found by discovery), so
   * unless insecure mode is on, the request connects only to public addresses, checked on the very
   * address it connects to (public-address.ts).
   */
  requestOptions(publicOnly = false) {
    const guardedFetch = async (url: string, init: RequestInit): Promise<Response> => {
      try {
        if (this.#fetch) return await this.#fetch(url, init);
        if (!publicOnly || this.#allowInsecure) return await fetch(url, init);
        // Loaded by the first such request (public-only-dispatcher.ts says why).
        const { PublicOnlyFetch } = await import('./public-only-dispatcher.ts');
        this.#publicOnly ??= new PublicOnlyFetch(this.#resolve, this.#timeoutMs);
        return await this.#publicOnly.fetch(url, init);
      } catch (err) {
        const refused = findNotPublicAddress(err);
        if (refused) throw notPublicError(null, refused.host);
        // Only a request that got no HTTP answer ends up here, so "unreachable" is never a guess.
        throw unreachableError(url, err);
      }
    };
    return {
      [oauth.customFetch]: guardedFetch,
      // Deprecated in oauth4webapi as a development escape hatch, which is exactly its use here.
      [oauth.allowInsecureRequests]: this.#allowInsecure,
      signal: () => AbortSignal.timeout(this.#timeoutMs),
    };
  }

  checkedUrl(field: string, value: string): URL {
    if (!URL.canParse(value)) throw new OAuthFlowError('configuration', `The provider's ${field} is not a valid URL`);
    const url = new URL(value);
    if (url.protocol === 'https:' || (url.protocol === 'http:' && this.#allowInsecure)) return url;
    throw new OAuthFlowError(
      'configuration',
      `The provider's ${field} must use https (plain http is accepted only in insecure development mode)`,
    );
  }

  /** Refuses a URL whose host is, or resolves to, an address that is not public (public-address.ts). */
  async checkPublic(field: string, url: URL): Promise<void> {
    if (!this.#allowInsecure) await assertPublicAddress(field, url, this.#resolve);
  }
}
