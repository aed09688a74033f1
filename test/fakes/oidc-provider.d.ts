// oidc-provider ships no type declarations and @types/oidc-provider is not a dependency; this declares
// only the surface test/fakes/oidc-server.ts uses. Configuration stays loosely typed on purpose: the
// package validates it at construction and the fake is the only caller.
declare module 'oidc-provider' {
  import type { IncomingMessage, ServerResponse } from 'node:http';

  export type Configuration = Record<string, unknown>;

  export default class Provider {
    constructor(issuer: string, configuration?: Configuration);
    readonly issuer: string;
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
    on(event: string, listener: (...args: unknown[]) => void): this;
  }
}
