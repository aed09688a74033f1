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
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import type { SsoConfig } from '../config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, notFound } from '../errors.ts';
import type { KeyActor } from '../service/key-actor.ts';
import type { Page } from '../service/page.ts';
import type { Database, Db } from '../store/schema.ts';
import { workspaceInOrganization } from '../store/tenancy.ts';
import { createOidcClient, type FetchLike } from './oidc-client.ts';
import { finishSignIn, hashToken, personData, startSignIn } from './sso-sign-in.ts';
import {
  accessOf,
  deleteMapping,
  endSession,
  findLiveSession,
  firstWorkspaceOf,
  insertMapping,
  listLiveSessions,
  listMappings,
  recordSsoEvent,
  workspacesOf,
  type MappingKind,
  type Role,
  type SessionRow,
} from './sso-store.ts';

export { AmbiguousAccessError, hashToken, NoAccessError, safeReturnTo } from './sso-sign-in.ts';

export interface SsoServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  sso: SsoConfig | null;
  /** SLIPWAY_PUBLIC_URL: the redirect URI registered at the provider is under it. */
  publicUrl: string;
  allowInsecure: boolean;
  /** Replaces fetch towards the provider (tests). */
  fetch?: FetchLike;
  /** What sessions' expiry is dated and judged by (src/sso/sso-store.ts); the database's `now()` when absent. */
  now?: Clock;
}

/** The callback URL, as it must be registered at the provider. */
export const redirectUriOf = (publicUrl: string): string => `${publicUrl}/v2/sso/callback`;

const strongest = (a: Role | null | undefined, b: Role | null | undefined): Role =>
  a === 'admin' || b === 'admin' ? 'admin' : 'member';

export interface MappingInput {
  kind: MappingKind;
  value: string;
  workspace_id: string | null;
  role: Role;
}

export function createSsoService(deps: SsoServiceDeps) {
  const db = deps.db;
  const { secretBox, sso, now } = deps;
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
    start: async (returnTo: unknown) =>
      startSignIn({ db, secretBox, redirectUri, ...configured(), ...(now ? { now } : {}) }, returnTo),

    /**
     * The provider's redirect back: `stateCookie` is this browser's state cookie. Throws SignInError
     * (the sign-in is no good) or NoAccessError (it is, but no mapping lets the person in).
     */
    finish: async (callback: URL, stateCookie: string | null) =>
      finishSignIn({ db, secretBox, redirectUri, ...configured(), ...(now ? { now } : {}) }, callback, stateCookie),

    /**
     * Ends the session of a cookie's token (signed out, or replaced by a new sign-in in the same
     * browser); nothing when it is unknown or over already.
     */
    async logout(token: string, reason: 'logout' | 'signed_in_again' = 'logout'): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const ended = await endSession(tx, { tokenHash: hashToken(token) }, now);
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
        return listLiveSessions(db, actor.organizationId, page.limit, page.offset, now);
      },

      async end(actor: KeyActor, id: string): Promise<void> {
        requireOrganizationAdmin(actor);
        await db.transaction().execute(async (tx) => {
          const ended = await endSession(tx, { id, organizationId: actor.organizationId }, now);
          if (ended === undefined) throw notFound('Session', id);
          await recordEnded(tx, ended, { reason: 'ended_by_admin', by_key: actor.keyId });
        });
      },
    },

    /** The live session of a cookie's token with the workspaces it opens now; null when there is none. */
    async describe(token: string | null) {
      if (token === null) return null;
      const session = await findLiveSession(db, hashToken(token), now);
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
