/**
 * Single sign-on for the dashboard (docs/operations.md, "Single sign-on"):
 *
 *   start ──(browser to the provider; state, PKCE verifier, nonce, return path and expiry sealed in a cookie;
 *            nothing stored)──>
 *   callback ──(cookie opened, state = the query's, unexpired, used once (its hash recorded); code + PKCE
 *               verifier exchanged; ID token verified)──>
 *   access from the mappings ──> session (random token in an HttpOnly cookie, its SHA-256 in a row)
 *
 * A person whose groups and verified e-mail domain match no mapping gets no session. A session's access
 * is worked out again from the mappings on every request (src/sso/session-credentials.ts), so a deleted
 * mapping takes effect at once; logout or an organization admin ends the session row.
 *
 * Glossary: a *mapping* gives a group of the provider's groups claim, or an e-mail domain, a role in one
 * workspace or (workspace null) in the whole organization. A *person* is an (issuer, subject) pair.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { SsoConfig } from '../config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, notFound } from '../errors.ts';
import type { KeyActor } from '../service/key-actor.ts';
import type { Page } from '../service/page.ts';
import type { Database, Db } from '../store/schema.ts';
import { workspaceInOrganization } from '../store/tenancy.ts';
import { createOidcClient, SignInError, type FetchLike, type IdTokenClaims } from './oidc-client.ts';
import {
  accessOf,
  deleteMapping,
  endSession,
  findLiveSession,
  firstWorkspaceOf,
  insertMapping,
  insertSession,
  listLiveSessions,
  listMappings,
  matchingMappings,
  pruneOldSessions,
  recordSsoEvent,
  stateUsed,
  useState,
  workspacesOf,
  type Access,
  type MappingKind,
  type PersonIdentity,
  type Role,
  type SessionRow,
} from './sso-store.ts';

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

export interface SsoServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  sso: SsoConfig | null;
  /** SLIPWAY_PUBLIC_URL: the redirect URI registered at the provider is under it. */
  publicUrl: string;
  allowInsecure: boolean;
  /** Replaces fetch towards the provider (tests). */
  fetch?: FetchLike;
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

/** The callback URL, as it must be registered at the provider. */
export const redirectUriOf = (publicUrl: string): string => `${publicUrl}/v2/sso/callback`;

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

const strongest = (a: Role | null | undefined, b: Role | null | undefined): Role =>
  a === 'admin' || b === 'admin' ? 'admin' : 'member';

const personData = (session: Pick<SessionRow, 'issuer' | 'subject' | 'email' | 'name'>) => ({
  issuer: session.issuer,
  subject: session.subject,
  email: session.email,
  name: session.name,
});

export interface MappingInput {
  kind: MappingKind;
  value: string;
  workspace_id: string | null;
  role: Role;
}

export function createSsoService(deps: SsoServiceDeps) {
  const db = deps.db;
  const { secretBox, sso } = deps;
  const redirectUri = redirectUriOf(deps.publicUrl);
  const oidc =
    sso === null
      ? null
      : createOidcClient({
          issuer: sso.issuer,
          clientId: sso.clientId,
          clientSecret: sso.clientSecret,
          scopes: sso.scopes,
          allowInsecure: deps.allowInsecure,
          fetch: deps.fetch,
        });

  function configured() {
    if (oidc === null || sso === null)
      throw new AppError('not_found', 'Single sign-on is not set up on this service (SLIPWAY_SSO_ISSUER).');
    return { oidc, sso };
  }

  /** An organization admin's own organization: mappings and sessions are organization-wide. */
  function requireOrganizationAdmin(actor: KeyActor): void {
    if (actor.keyWorkspaceId !== null)
      throw new AppError('forbidden', 'Single sign-on is managed by an organization admin (not bound to a workspace).');
  }

  return {
    enabled: sso !== null,
    providerName: sso?.providerName ?? null,
    sessionTtlMs: sso?.sessionTtlMs ?? 0,

    /**
     * A new sign-in: where to send the browser, and its state cookie (the sign-in sealed: cookie-safe,
     * base64url parts joined by dots). Nothing is stored.
     */
    async start(returnTo: unknown): Promise<{ url: string; cookie: string; ttlSeconds: number }> {
      const { oidc } = configured();
      const started = await oidc.authorizationRequest(redirectUri);
      const state: SignInState = {
        p: SIGN_IN_PURPOSE,
        s: started.state,
        v: started.codeVerifier,
        n: started.nonce,
        r: safeReturnTo(returnTo),
        e: Date.now() + SIGN_IN_TTL_SECONDS * 1000,
      };
      return { url: started.url, cookie: secretBox.seal(JSON.stringify(state)), ttlSeconds: SIGN_IN_TTL_SECONDS };
    },

    /**
     * The provider's redirect back: `stateCookie` is this browser's state cookie. Throws SignInError
     * (the sign-in is no good) or NoAccessError (it is, but no mapping lets the person in).
     */
    async finish(callback: URL, stateCookie: string | null) {
      const { oidc, sso } = configured();
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
      if (pending.e <= Date.now() || (await stateUsed(db, stateHash))) throw used();
      const claims = await oidc.finish(
        callback,
        { state: pending.s, codeVerifier: pending.v, nonce: pending.n },
        redirectUri,
      );
      // Recorded once the provider accepted the code (it gives each code once, so two copies of a
      // callback racing here cannot both get this far); only real sign-ins add a row.
      if (!(await useState(db, stateHash, new Date(pending.e)))) throw used();
      const identity = identityOf(claims, sso.groupsClaim);
      const organizations = [
        ...new Set((await matchingMappings(db, identity, null)).map((mapping) => mapping.organization_id)),
      ];
      if (organizations.length > 1) throw new AmbiguousAccessError(identity.email, organizations);
      const access = organizations.length === 1 ? await accessOf(db, identity, organizations[0]!) : null;
      if (access === null) throw new NoAccessError(identity.email, identity.groups);
      const token = randomBytes(32).toString('base64url');
      const session = await db.transaction().execute(async (tx) => {
        await pruneOldSessions(tx);
        const row = await insertSession(tx, {
          tokenHash: hashToken(token),
          organizationId: access.organizationId,
          issuer: claims.iss,
          subject: claims.sub,
          email: identity.email,
          emailVerified: identity.emailVerified,
          name: identity.name,
          groups: identity.groups,
          ttlMs: sso.sessionTtlMs,
        });
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
    },

    /**
     * Ends the session of a cookie's token (signed out, or replaced by a new sign-in in the same
     * browser); nothing when it is unknown or over already.
     */
    async logout(token: string, reason: 'logout' | 'signed_in_again' = 'logout'): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const ended = await endSession(tx, { tokenHash: hashToken(token) });
        if (ended === undefined) return;
        await recordEnded(tx, ended, { reason });
      });
    },

    mappings: {
      async create(actor: KeyActor, input: MappingInput) {
        requireOrganizationAdmin(actor);
        const value = input.kind === 'email_domain' ? input.value.toLowerCase().replace(/^@/, '') : input.value;
        if (
          input.workspace_id !== null &&
          !(await workspaceInOrganization(deps.db, input.workspace_id, actor.organizationId))
        )
          throw new AppError('invalid_reference', `workspace_id: Workspace ID ${input.workspace_id} not found.`);
        return db.transaction().execute(async (tx) => {
          const row = await insertMapping(tx, {
            organizationId: actor.organizationId,
            kind: input.kind,
            value,
            workspaceId: input.workspace_id,
            role: input.role,
          });
          if (row === null)
            throw new AppError(
              'conflict',
              `A mapping of ${input.kind} '${value}' to this workspace already exists; delete it to change its role.`,
            );
          await recordMappingEvent(tx, actor, row, 'sso_mapping.created');
          return row;
        });
      },

      list(actor: KeyActor, page: Page) {
        requireOrganizationAdmin(actor);
        return listMappings(db, actor.organizationId, page.limit, page.offset);
      },

      async remove(actor: KeyActor, id: string): Promise<void> {
        requireOrganizationAdmin(actor);
        await db.transaction().execute(async (tx) => {
          const row = await deleteMapping(tx, actor.organizationId, id);
          if (row === undefined) throw notFound('Mapping', id);
          await recordMappingEvent(tx, actor, row, 'sso_mapping.deleted');
        });
      },
    },

    sessions: {
      list(actor: KeyActor, page: Page) {
        requireOrganizationAdmin(actor);
        return listLiveSessions(db, actor.organizationId, page.limit, page.offset);
      },

      async end(actor: KeyActor, id: string): Promise<void> {
        requireOrganizationAdmin(actor);
        await db.transaction().execute(async (tx) => {
          const ended = await endSession(tx, { id, organizationId: actor.organizationId });
          if (ended === undefined) throw notFound('Session', id);
          await recordEnded(tx, ended, { reason: 'ended_by_admin', by_key: actor.keyId });
        });
      },
    },

    /** The live session of a cookie's token with the workspaces it opens now; null when there is none. */
    async describe(token: string | null) {
      if (token === null) return null;
      const session = await findLiveSession(db, hashToken(token));
      if (session === undefined) return null;
      const access = await accessOf(
        db,
        { email: session.email, emailVerified: session.email_verified, groups: session.groups },
        session.organization_id,
      );
      if (access === null) return null;
      const workspaces = (await workspacesOf(db, session.organization_id))
        .filter((w) => access.organizationRole !== null || access.workspaces.has(w.id))
        .map((w) => ({ ...w, role: strongest(access.organizationRole, access.workspaces.get(w.id)) }));
      return { session, organizationRole: access.organizationRole, workspaces };
    },
  };

  /** A mapping's audit line: in its workspace, or the organization's first for an organization-wide one. */
  async function recordMappingEvent(
    tx: Db,
    actor: KeyActor,
    row: MappingRow,
    type: 'sso_mapping.created' | 'sso_mapping.deleted',
  ): Promise<void> {
    await recordSsoEvent(tx, {
      workspaceId: row.workspace_id ?? (await firstWorkspaceOf(tx, actor.organizationId)),
      subjectType: 'sso_mapping',
      subjectId: row.id,
      type,
      data: { kind: row.kind, value: row.value, workspace_id: row.workspace_id, role: row.role, by_key: actor.keyId },
    });
  }

  async function recordEnded(tx: Db, session: SessionRow, data: Record<string, unknown>): Promise<void> {
    await recordSsoEvent(tx, {
      workspaceId: await firstWorkspaceOf(tx, session.organization_id),
      subjectType: 'sso_session',
      subjectId: session.id,
      type: 'sso_session.ended',
      data: { ...personData(session), ...data },
    });
  }
}

type MappingRow = NonNullable<Awaited<ReturnType<typeof insertMapping>>>;

export type SsoService = ReturnType<typeof createSsoService>;
