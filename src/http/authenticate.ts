/**
 * API-key authentication and workspace resolution (docs/api.md, "Authentication and tenancy").
 * Routes declare `config.auth`: 'workspace' (default: the request acts in one workspace),
 * 'organization' (the key's organization is enough), 'listener' (the listener protocol: a listener
 * credential, or a workspace API key), or 'none'; `config.admin` asks for the admin role: `true` an
 * admin key (of the workspace or of the organization), `'organization'` an organization admin key (one
 * bound to no workspace). On 'listener' routes it applies to API keys only (a listener credential is
 * checked by the route). docs/api.md, "Who may do what", is the table of every route.
 */
import type { FastifyInstance, FastifyRequest, onSendHookHandler } from 'fastify';
import { hashCredential, isCredentialOf } from '../auth/credentials.ts';

import { AppError, ValidationError } from '../errors.ts';
import type { SessionCredentials, SessionPerson } from '../sso/session-credentials.ts';
import { findActiveListenerCredential, type ListenerCredentialIdentity } from '../store/listener-credentials.ts';
import type { Db } from '../store/schema.ts';
import { findActiveKeyByHash, firstWorkspaceIds, workspaceInOrganization, type KeyRecord } from '../store/tenancy.ts';

export interface Caller {
  keyId: string;
  keyName: string;
  organizationId: string;
  /** The key's own workspace; null for an organization key. */
  keyWorkspaceId: string | null;
  role: 'admin' | 'member';
  /** The workspace this request acts in; null only on 'organization' routes without X-Tenant-Id. */
  workspaceId: string | null;
  /** Set when a dashboard sign-in session (src/sso/) stands in for a key: keyId is then the session's id. */
  person?: SessionPerson;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: 'workspace' | 'organization' | 'listener' | 'none';
    admin?: boolean | 'organization';
  }
  interface FastifyRequest {
    caller: Caller;
    /** Set instead of `caller` when a listener credential opened a 'listener' route. */
    listenerCredential: ListenerCredentialIdentity | null;
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function presentedKey(request: FastifyRequest): string | null {
  const header = request.headers['x-api-key'];
  if (typeof header === 'string' && header.trim() !== '') return header.trim();
  const authorization = request.headers.authorization;
  const match = typeof authorization === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(authorization) : null;
  return match?.[1] ?? null;
}

function requestedWorkspace(request: FastifyRequest): string | null {
  const raw = request.headers['x-tenant-id'];
  if (raw === undefined) return null;
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (value === undefined || !UUID.test(value.trim())) {
    throw new ValidationError([
      { type: 'uuid_parsing', loc: ['header', 'x-tenant-id'], msg: 'Input should be a valid UUID', input: value },
    ]);
  }
  return value.trim().toLowerCase();
}

/**
 * How long a key lookup is reused. This is the bound on revocation: a key revoked through another
 * replica (or in the database directly) stops working here at most this long after the revocation
 * commits; through this replica it stops at once (the cache is cleared by every admin write, below).
 * Under load almost every request is then served without the lookup query (docs/performance.md).
 */
export const KEY_CACHE_TTL_MS = 1_000;
const KEY_CACHE_MAX_ENTRIES = 10_000;

/** Active keys by hash, each remembered for KEY_CACHE_TTL_MS; concurrent lookups of one key share a query. */
function createKeyCache(db: Db) {
  const entries = new Map<string, { until: number; record: Promise<KeyRecord | undefined> }>();
  return {
    lookup(key: string): Promise<KeyRecord | undefined> {
      const hash = hashCredential(key);
      const id = hash.toString('base64');
      const now = performance.now();
      const hit = entries.get(id);
      if (hit !== undefined && hit.until > now) return hit.record;
      const entry = { until: now + KEY_CACHE_TTL_MS, record: findActiveKeyByHash(db, hash) };
      entries.delete(id);
      if (entries.size >= KEY_CACHE_MAX_ENTRIES) entries.delete(entries.keys().next().value!);
      entries.set(id, entry);
      // Only a key that exists is remembered: an unknown key, or a failed lookup, is asked again next
      // time. The failure itself reaches the caller through `entry.record`; here it only evicts.
      const forget = () => {
        if (entries.get(id) === entry) entries.delete(id);
      };
      entry.record.then((record) => record === undefined && forget(), forget);
      return entry.record;
    },
    clear(): void {
      entries.clear();
    },
  };
}

type KeyCache = ReturnType<typeof createKeyCache>;

async function resolveCaller(
  keys: KeyCache,
  db: Db,
  request: FastifyRequest,
  mode: 'workspace' | 'organization',
  sessions: SessionCredentials | null,
): Promise<Caller> {
  const key = presentedKey(request);
  // Without a key, the dashboard's sign-in cookie may stand in for one (src/sso/session-credentials.ts).
  // X-Tenant-Id is read only once a credential is found to be usable: without one the answer is 401,
  // whatever else is wrong with the request (a malformed X-Tenant-Id is 422 only to a caller who may ask).
  const session =
    key === null && sessions ? await sessions.callerOf(request, mode, () => requestedWorkspace(request)) : null;
  if (session) return session;
  if (key === null) throw new AppError('unauthenticated', 'Missing API key: send X-Api-Key or Authorization: Bearer.');
  // A key without the prefix (a bootstrap key an older version made from such a value) opens nothing:
  // the app edges would not remove it from a request to an app.
  const record = key.length <= 512 && isCredentialOf('apiKey', key) ? await keys.lookup(key) : undefined;
  if (!record) throw new AppError('unauthenticated', 'Invalid API key.');
  const asked = requestedWorkspace(request);
  const caller: Caller = {
    keyId: record.id,
    keyName: record.name,
    organizationId: record.organization_id,
    keyWorkspaceId: record.workspace_id,
    role: record.role,
    workspaceId: record.workspace_id,
  };
  if (record.workspace_id !== null) {
    if (asked !== null && asked !== record.workspace_id)
      throw new AppError('forbidden', 'This API key does not belong to the workspace in X-Tenant-Id.');
    return caller;
  }
  if (asked !== null) {
    if (!(await workspaceInOrganization(db, asked, record.organization_id))) {
      throw new AppError('forbidden', "The workspace in X-Tenant-Id is not part of this API key's organization.");
    }
    return { ...caller, workspaceId: asked };
  }
  const workspaces = await firstWorkspaceIds(db, record.organization_id);
  if (workspaces.length === 1) return { ...caller, workspaceId: workspaces[0]! };
  if (mode === 'organization') return caller;
  throw new AppError(
    'workspace_required',
    'This organization API key requires workspace specification: send X-Tenant-Id.',
  );
}

/**
 * Authenticates every request by its route's `auth` and `admin` (declared with the route,
 * src/http/route-needs.ts). Returns the hook that an admin write declares after itself (route-needs.ts
 * attaches it): it forgets every cached key lookup.
 */
export function registerAuthentication(
  app: FastifyInstance,
  db: Db,
  sessions: SessionCredentials | null = null,
): { forgetKeys: onSendHookHandler } {
  const keys = createKeyCache(db);
  app.decorateRequest('caller', null as unknown as Caller);
  app.decorateRequest('listenerCredential', null);
  app.addHook('onRequest', async (request) => {
    const config = request.routeOptions.config;
    const mode = config?.auth ?? 'workspace';
    // Routes not found have no config; let the not-found handler answer them.
    if (mode === 'none' || request.is404) return;
    // A listener credential is not an API key: it opens the listener protocol and nothing else (the
    // route checks it is for the listener in the path). Told apart by its prefix, so never cached here.
    const presented = presentedKey(request);
    if (presented !== null && isCredentialOf('listener', presented)) {
      if (mode !== 'listener')
        throw new AppError(
          'unauthenticated',
          'A listener credential opens only the listener protocol endpoints (docs/listener-protocol.md); use an API key here.',
        );
      const credential =
        presented.length <= 512 ? await findActiveListenerCredential(db, hashCredential(presented)) : undefined;
      if (!credential) throw new AppError('unauthenticated', 'Invalid listener credential.');
      request.listenerCredential = credential;
      return;
    }
    // The listener protocol is for machines (a listener credential, or an admin key): a browser session
    // does not open it (its desired state holds the deployments' secrets in clear).
    request.caller =
      mode === 'listener'
        ? await resolveCaller(keys, db, request, 'workspace', null)
        : await resolveCaller(keys, db, request, mode, sessions);
    const admin = config?.admin ?? false;
    if (admin === 'organization' && (request.caller.role !== 'admin' || request.caller.keyWorkspaceId !== null))
      throw new AppError(
        'forbidden',
        'This operation needs an organization admin key: an organization API key (not bound to a workspace) with the admin role.',
      );
    if (admin === true && request.caller.role !== 'admin')
      throw new AppError('forbidden', 'This operation needs an admin API key.');
  });
  // Keys are created and revoked only through admin routes: after any admin write, and before its
  // response leaves, every cached lookup is forgotten, so this replica never accepts a key it revoked.
  // Attached to those routes only (route-needs.ts), so that other requests pay nothing for it.
  const forgetKeys: onSendHookHandler = (_request, _reply, payload, done) => {
    keys.clear();
    done(null, payload);
  };
  return { forgetKeys };
}

/** The workspace of a 'workspace' route: always set there by the hook above. */
export function workspaceOf(request: FastifyRequest): string {
  const id = request.caller.workspaceId;
  if (id === null)
    throw new AppError(
      'workspace_required',
      'This organization API key requires workspace specification: send X-Tenant-Id.',
    );
  return id;
}
