/**
 * JSON requests over real HTTP (fetch) to a listening test app, with an API key by default. Every answer
 * is checked against the document the app serves (openapi-conformance.ts), as `client` does.
 */
import { ADMIN_KEY } from './harness.ts';
import { assertAnswerDocumented } from './openapi-conformance.ts';

export interface HttpAnswer {
  status: number;
  headers: Headers;
  text: string;
  body: any;
}

export interface HttpCallOptions {
  body?: unknown;
  headers?: Record<string, string>;
  /** Another API key than the admin key. */
  key?: string;
}

export type HttpCall = (method: string, path: string, options?: HttpCallOptions) => Promise<HttpAnswer>;

/** A caller of the app at `base` (what `app.listen` answered). */
export function httpCaller(base: string): HttpCall {
  return async (method, path, options = {}) => {
    const headers: Record<string, string> = { 'x-api-key': options.key ?? ADMIN_KEY, ...options.headers };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
    const text = await response.text();
    await assertAnswerDocumented(
      { base },
      {
        method,
        url: path,
        status: response.status,
        header: (name) => response.headers.get(name) ?? undefined,
        body: text,
      },
    );
    return {
      status: response.status,
      headers: response.headers,
      text,
      body: text === '' ? undefined : JSON.parse(text),
    };
  };
}
