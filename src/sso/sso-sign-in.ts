/**
 * Signing in to the dashboard through the service's OpenID Connect provider (the flow in
 * src/sso/sso-service.ts's header): the sign-in's sealed state cookie, the callback's checks, the
 * person's identity from the ID token's claims, and the session a person with access gets.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { systemClock, type Clock } from '../clock.ts';
import type { SsoConfig } from '../config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { Database, Db } from '../store/schema.ts';
import { SignInError, type IdTokenClaims, type OidcClient } from './oidc-client.ts';
import {
  accessOf,
  firstWorkspaceOf,
  insertSession,
  matchingMappings,
  pruneOldSessions,
  recordSsoEvent,
  stateUsed,
  useState,
  type Access,
  type PersonIdentity,
  type SessionRow,
} from './sso-store.ts';

/** What a sign-in needs: the service's database and SecretBox, and the configured provider. */
export interface SignInDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  /** The callback URL registered at the provider. */
  redirectUri: string;
  oidc: OidcClient;
  sso: SsoConfig;
  /**
   * The service's clock: what a sign-in's ten minutes and a session's expiry are dated and judged by
   * (src/sso/sso-store.ts); the real time, and the database's `now()` in SQL, when absent.
   */
  now?: Clock;
}

/** How long a person has to finish signing in at the provider. */
const SIGN_IN_TTL_SECONDS = 10 * 60;
const MAX_GROUPS = 1_000;
/** Marks a sealed value as a sign-in's state cookie (no other sealed value passes for one). */
const SIGN_IN_PURPOSE = 'sso_sign_in.v1';

/**
 * A sign-in under way, as its state cookie carries it (sealed with the service's SecretBox, so the
 * browser can neither read the PKCE verifier nor change a field). Starting a sign-in stores nothing,
 * so anonymous starts in any number cost the service no row and keep nobody out.
 */
interface SignInState {
  p: typeof SIGN_IN_PURPOSE;
  /** The OAuth state, as the provider sends it back. */
  s: string;
  /** The PKCE code verifier. */
  v: string;
  /** The OpenID Connect nonce. */
  n: string;
  /** The dashboard path to go to once signed in. */
  r: string;
  /** Expiry, in milliseconds since the epoch. */
  e: number;
}

function openSignInState(secretBox: SecretBox, cookie: string): SignInState | null {
  let value: unknown;
  try {
    value = JSON.parse(secretBox.open(cookie));
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null) return null;
  const v = value as Record<string, unknown>;
  const text = (x: unknown) => typeof x === 'string' && x !== '';
  if (v.p !== SIGN_IN_PURPOSE || !text(v.s) || !text(v.v) || !text(v.n) || !text(v.r) || typeof v.e !== 'number')
    return null;
  return v as unknown as SignInState;
}

/** A sign-in that ended without access: the page says who the provider said the person is. */
export class NoAccessError extends Error {
  constructor(
    readonly email: string | null,
    readonly groups: readonly string[],
  ) {
    super('No workspace is mapped to this account.');
    this.name = 'NoAccessError';
  }
}

/**
 * The person matches mappings of more than one organization. Every organization shares the service's
 * one identity provider, and a mapping's group or domain is a string any organization admin may type:
 * signing the person in to any one of them (say the oldest) would let an organization capture another's
 * people by mapping their group. Nobody is signed in until the organizations' admins settle it.
 */
export class AmbiguousAccessError extends Error {
  constructor(
    readonly email: string | null,
    readonly organizationIds: readonly string[],
  ) {
    super('This account is mapped in more than one organization.');
    this.name = 'AmbiguousAccessError';
  }
}

export const hashToken = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

/** A path of the dashboard to return to; anything else (another origin, `//host`) is the start page. */
export function safeReturnTo(value: unknown): string {
  if (typeof value !== 'string' || value.length > 512) return '/';
  return /^\/(?![/\\])[\x21-\x7e]*$/.test(value) ? value : '/';
}

function identityOf(claims: IdTokenClaims, groupsClaim: string): PersonIdentity & { name: string | null } {
  const text = (value: unknown, max: number) =>
    typeof value === 'string' && value !== '' && value.length <= max ? value : null;
  const raw = claims[groupsClaim];
  const groups = (Array.isArray(raw) ? raw : typeof raw === 'string' ? [raw] : [])
    .filter((g): g is string => typeof g === 'string' && g !== '' && g.length <= 256)
    .slice(0, MAX_GROUPS);
  return {
    email: text(claims.email, 320)?.toLowerCase() ?? null,
    // Some providers send the boolean as a string.
    emailVerified: claims.email_verified === true || claims.email_verified === 'true',
    name: text(claims.name, 256) ?? text(claims.preferred_username, 256),
    groups: [...new Set(groups)],
  };
}

/** Where an event about a person goes (events belong to a workspace): their first workspace. */
async function auditWorkspace(db: Db, access: Access): Promise<string> {
  return access.workspaces.keys().next().value ?? (await firstWorkspaceOf(db, access.organizationId));
}

export const personData = (session: Pick<SessionRow, 'issuer' | 'subject' | 'email' | 'name'>) => ({
  issuer: session.issuer,
  subject: session.subject,
  email: session.email,
  name: session.name,
});

/**
 * A new sign-in: where to send the browser, and its state cookie (the sign-in sealed: cookie-safe,
 * base64url parts joined by dots). Nothing is stored.
 */
export async function startSignIn(
  deps: SignInDeps,
  returnTo: unknown,
): Promise<{ url: string; cookie: string; ttlSeconds: number }> {
  const { oidc, secretBox, redirectUri, now } = deps;
  const started = await oidc.authorizationRequest(redirectUri);
  const state: SignInState = {
    p: SIGN_IN_PURPOSE,
    s: started.state,
    v: started.codeVerifier,
    n: started.nonce,
    r: safeReturnTo(returnTo),
    e: (now ?? systemClock)().getTime() + SIGN_IN_TTL_SECONDS * 1000,
  };
  return { url: started.url, cookie: secretBox.seal(JSON.stringify(state)), ttlSeconds: SIGN_IN_TTL_SECONDS };
}

/**
 * The provider's redirect back: `stateCookie` is this browser's state cookie. Throws SignInError
 * (the sign-in is no good) or NoAccessError (it is, but no mapping lets the person in).
 */
export async function finishSignIn(deps: SignInDeps, callback: URL, stateCookie: string | null) {
  const { db, secretBox, redirectUri, oidc, sso, now } = deps;
  const states = callback.searchParams.getAll('state');
  const pending = stateCookie === null ? null : openSignInState(secretBox, stateCookie);
  // The state must come back to the browser that started the sign-in: a link with someone else's
  // code and state (login CSRF) finds no matching cookie here.
  if (pending === null || states.length !== 1 || states[0] !== pending.s)
    throw new SignInError(
      'state_mismatch',
      'This sign-in was not started in this browser, or it took too long. Start again from the sign-in page.',
    );
  // The cookie is removed after the callback, but a copy of it must not work twice either.
  const used = () =>
    new SignInError(
      'state_mismatch',
      'This sign-in was finished already or has expired. Start again from the sign-in page.',
    );
  const stateHash = hashToken(pending.s);
  if (pending.e <= (now ?? systemClock)().getTime() || (await stateUsed(db, stateHash))) throw used();
  const claims = await oidc.finish(
    callback,
    { state: pending.s, codeVerifier: pending.v, nonce: pending.n },
    redirectUri,
  );
  // Recorded once the provider accepted the code (it gives each code once, so two copies of a
  // callback racing here cannot both get this far); only real sign-ins add a row.
  if (!(await useState(db, stateHash, new Date(pending.e), now))) throw used();
  const identity = identityOf(claims, sso.groupsClaim);
  const organizations = [
    ...new Set((await matchingMappings(db, identity, null)).map((mapping) => mapping.organization_id)),
  ];
  if (organizations.length > 1) throw new AmbiguousAccessError(identity.email, organizations);
  const access = organizations.length === 1 ? await accessOf(db, identity, organizations[0]!) : null;
  if (access === null) throw new NoAccessError(identity.email, identity.groups);
  const token = randomBytes(32).toString('base64url');
  const session = await db.transaction().execute(async (tx) => {
    await pruneOldSessions(tx, now);
    const row = await insertSession(
      tx,
      {
        tokenHash: hashToken(token),
        organizationId: access.organizationId,
        issuer: claims.iss,
        subject: claims.sub,
        email: identity.email,
        emailVerified: identity.emailVerified,
        name: identity.name,
        groups: identity.groups,
        ttlMs: sso.sessionTtlMs,
      },
      now,
    );
    await recordSsoEvent(tx, {
      workspaceId: await auditWorkspace(tx, access),
      subjectType: 'sso_session',
      subjectId: row.id,
      type: 'sso_session.created',
      data: {
        ...personData({ issuer: claims.iss, subject: claims.sub, email: identity.email, name: identity.name }),
        organization_role: access.organizationRole,
        workspaces: Object.fromEntries(access.workspaces),
      },
    });
    return row;
  });
  return { token, session, who: identity.email ?? identity.name ?? claims.sub, returnTo: pending.r };
}
