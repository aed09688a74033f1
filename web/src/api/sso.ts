/**
 * Single sign-on from the page: whether the service has it and who is signed in, starting a sign-in
 * (the browser goes to the identity provider and comes back signed in), and signing out. The session
 * itself is an HttpOnly cookie the page never sees; same-origin requests carry it by themselves.
 */
import createClient from 'openapi-fetch';
import type { components, paths } from '@slipway/sdk/api-types';
import { data } from './client.ts';

export type SsoStatus = components['schemas']['SsoStatus'];

const api = () => createClient<paths>({ baseUrl: window.location.origin });

export function ssoStatus(): Promise<SsoStatus> {
  return data(api().GET('/v2/sso/session'));
}

/** Sends the browser to the identity provider; it comes back to `returnTo` signed in. */
export async function startSsoSignIn(returnTo: string): Promise<void> {
  const { url } = await data(api().POST('/v2/sso/login', { body: { return_to: returnTo } }));
  window.location.assign(url);
}

export async function ssoSignOut(): Promise<void> {
  await data(api().POST('/v2/sso/logout'));
}
