/**
 * The session cookie as a credential (src/http/authenticate.ts asks here when a request carries no API
 * key). A session opens what the person's mappings give them now: a role in each mapped workspace, and
 * for an organization-wide mapping the role an organization key of that role would have. It picks its
 * workspace with X-Tenant-Id like an organization key, and is refused a workspace it has no mapping for.
 *
 * Cross-site request forgery: a write (any method but GET, HEAD, OPTIONS) made with the cookie must
 * come from the dashboard's own origin, the public URL's: its `Origin` header must say so, and when the
 * browser sends `Sec-Fetch-Site`, it must be `same-origin`. SameSite=Lax alone is not enough, since apps
 * on sibling host names of the same site would count as same-site. API keys are not cookies: requests
 * with a key are never checked this way.
 */
import type { FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import type { Caller } from '../http/authenticate.ts';
import { AppError } from '../errors.ts';
import type { Database } from '../store/schema.ts';
import { firstWorkspaceIds, workspaceInOrganization } from '../store/tenancy.ts';
import { cookieNames, readCookie } from './session-cookie.ts';
import { hashToken } from './sso-service.ts';
import { accessOf, findLiveSession, type Role } from './sso-store.ts';

/** Who a session's request is: the person, for audit lines and the dashboard. */
export interface SessionPerson {
  sessionId: string;
  issuer: string;
  subject: string;
  email: string | null;
  name: string | null;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

const stronger = (a: Role | null | undefined, b: Role | null | undefined): Role | null =>
  a === 'admin' || b === 'admin' ? 'admin' : (a ?? b ?? null);

/** `now`: the service's clock (src/clock.ts), what a session's expiry is judged by; the database's `now()` without one. */
export function createSessionCredentials({
  db,
  publicUrl,
  now,
}: {
  db: Kysely<Database>;
  publicUrl: string;
  now?: Clock;
}) {
  const names = cookieNames(publicUrl);
  const origin = new URL(publicUrl).origin;

  function checkSameOrigin(request: FastifyRequest): void {
    if (SAFE_METHODS.has(request.method)) return;
    const site = request.headers['sec-fetch-site'];
    if (request.headers.origin !== origin || (site !== undefined && site !== 'same-origin'))
      throw new AppError(
        'forbidden',
        `A change made with the sign-in cookie must come from the dashboard's own pages (${origin}); use an API key from elsewhere.`,
      );
  }

  return {
    /** The session token of the request, when it carries the cookie. */
    tokenOf: (request: FastifyRequest): string | null => readCookie(request, names.session),

    /**
     * The caller of a request that carries the session cookie and no API key; null without the cookie.
     * `requested` reads the workspace of X-Tenant-Id (a 422 when malformed): asked only once the session
     * is found live, so that a request without a usable credential is 401 whatever its X-Tenant-Id.
     */
    async callerOf(
      request: FastifyRequest,
      mode: 'workspace' | 'organization',
      requested: () => string | null,
    ): Promise<Caller | null> {
      const token = readCookie(request, names.session);
      if (token === null) return null;
      const session = await findLiveSession(db, hashToken(token), now);
      if (session === undefined)
        throw new AppError('unauthenticated', 'Your sign-in has ended (signed out or expired). Sign in again.');
      checkSameOrigin(request);
      const asked = requested();
      const access = await accessOf(
        db,
        { email: session.email, emailVerified: session.email_verified, groups: session.groups },
        session.organization_id,
      );
      if (access === null)
        throw new AppError(
          'unauthenticated',
          'No workspace is mapped to your account any more. Ask an organization admin, then sign in again.',
        );
      const person: SessionPerson = {
        sessionId: session.id,
        issuer: session.issuer,
        subject: session.subject,
        email: session.email,
        name: session.name,
      };
      const caller = (workspaceId: string | null, role: Role): Caller => ({
        // The session stands where a key would: audit lines of the services name it as by_key.
        keyId: session.id,
        keyName: `sso:${session.email ?? session.subject}`,
        organizationId: session.organization_id,
        // An organization key only with the role of the organization-wide mapping itself: a stronger role
        // from one workspace's mapping acts like a key of that workspace (an organization-wide member who
        // is admin of one workspace is no organization admin).
        keyWorkspaceId: access.organizationRole !== null && role === access.organizationRole ? null : workspaceId,
        role,
        workspaceId,
        person,
      });
      if (asked !== null) {
        const role = stronger(access.organizationRole, access.workspaces.get(asked));
        const inOrganization =
          access.workspaces.has(asked) ||
          (access.organizationRole !== null && (await workspaceInOrganization(db, asked, session.organization_id)));
        if (role === null || !inOrganization)
          throw new AppError('forbidden', 'Your account has no access to the workspace in X-Tenant-Id.');
        return caller(asked, role);
      }
      const candidates =
        access.organizationRole !== null
          ? await firstWorkspaceIds(db, session.organization_id)
          : [...access.workspaces.keys()].slice(0, 2);
      if (candidates.length === 1) {
        const only = candidates[0]!;
        return caller(only, stronger(access.organizationRole, access.workspaces.get(only))!);
      }
      if (mode === 'organization' && access.organizationRole !== null) return caller(null, access.organizationRole);
      throw new AppError(
        'workspace_required',
        'Your account opens several workspaces: this request requires workspace specification (X-Tenant-Id).',
      );
    },
  };
}

export type SessionCredentials = ReturnType<typeof createSessionCredentials>;
