/**
 * The tables of single sign-on (migrations/016_sso.sql): mappings from a provider's groups and e-mail
 * domains to workspace roles, the states of finished sign-ins (no replay), and sessions. Their table types are in
 * src/store/schema.ts, with every other table's.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Clock } from '../clock.ts';
import type { EventType } from '../domain/event-types.ts';
import type { SsoMappingKind, SsoRole } from '../store/schema-sso.ts';
import { json, type Db } from '../store/schema.ts';
import { sqlNow } from '../store/sql-now.ts';

export type Role = SsoRole;
export type MappingKind = SsoMappingKind;

export interface PersonIdentity {
  email: string | null;
  emailVerified: boolean;
  groups: readonly string[];
}

/** What a person may do: a role per workspace, and the organization-wide role (null: none). */
export interface Access {
  organizationId: string;
  organizationRole: Role | null;
  workspaces: Map<string, Role>;
}

const stronger = (a: Role | null | undefined, b: Role): Role => (a === 'admin' || b === 'admin' ? 'admin' : 'member');

/** The e-mail domain a mapping can match: only of a verified address (else anyone could claim one). */
export function verifiedDomain(identity: PersonIdentity): string | null {
  if (!identity.emailVerified || identity.email === null) return null;
  const at = identity.email.lastIndexOf('@');
  return at > 0 ? identity.email.slice(at + 1).toLowerCase() : null;
}

/**
 * The mappings a person matches, in one organization or (organizationId null) in any, in a stable
 * order. A sign-in matching mappings of two organizations signs the person in to neither
 * (AmbiguousAccessError in sso-service.ts).
 */
export async function matchingMappings(db: Db, identity: PersonIdentity, organizationId: string | null) {
  const domain = verifiedDomain(identity);
  const groups = [...identity.groups];
  let query = db
    .selectFrom('sso_mappings as m')
    .innerJoin('organizations as o', 'o.id', 'm.organization_id')
    .select(['m.id', 'm.organization_id', 'm.kind', 'm.value', 'm.workspace_id', 'm.role'])
    .where((eb) =>
      eb.or([
        ...(groups.length > 0 ? [eb.and([eb('m.kind', '=', 'group'), eb('m.value', 'in', groups)])] : []),
        ...(domain !== null ? [eb.and([eb('m.kind', '=', 'email_domain'), eb('m.value', '=', domain)])] : []),
        eb.val(false),
      ]),
    );
  if (organizationId !== null) query = query.where('m.organization_id', '=', organizationId);
  return query.orderBy('o.created_at').orderBy('o.id').orderBy('m.created_at').execute();
}

/** A person's access in an organization, from the mappings they match now; null when none. */
export async function accessOf(
  db: Db,
  identity: PersonIdentity,
  organizationId: string | null,
): Promise<Access | null> {
  const rows = await matchingMappings(db, identity, organizationId);
  const first = rows[0];
  if (first === undefined) return null;
  const access: Access = { organizationId: first.organization_id, organizationRole: null, workspaces: new Map() };
  for (const row of rows) {
    if (row.organization_id !== access.organizationId) continue;
    if (row.workspace_id === null) access.organizationRole = stronger(access.organizationRole, row.role);
    else access.workspaces.set(row.workspace_id, stronger(access.workspaces.get(row.workspace_id), row.role));
  }
  return access;
}

export async function insertMapping(
  db: Db,
  mapping: { organizationId: string; kind: MappingKind; value: string; workspaceId: string | null; role: Role },
) {
  const row = await db
    .insertInto('sso_mappings')
    .values({
      id: randomUUID(),
      organization_id: mapping.organizationId,
      kind: mapping.kind,
      value: mapping.value,
      workspace_id: mapping.workspaceId,
      role: mapping.role,
    })
    // The unique index makes a concurrent twin lose here; the transaction stays usable.
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
  return row ?? null;
}

export function listMappings(db: Db, organizationId: string, limit: number, offset: number) {
  return db
    .selectFrom('sso_mappings')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function deleteMapping(db: Db, organizationId: string, id: string) {
  return db
    .deleteFrom('sso_mappings')
    .where('id', '=', id)
    .where('organization_id', '=', organizationId)
    .returningAll()
    .executeTakeFirst();
}

/** Whether a callback with this state got through already (see useState). */
export async function stateUsed(db: Db, stateHash: Buffer): Promise<boolean> {
  const row = await db
    .selectFrom('sso_used_states')
    .select('state_hash')
    .where('state_hash', '=', stateHash)
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * Marks a sign-in's state used, once: true the first time, false when a callback with this state got
 * through already. Called only once the provider accepted the code, so only real sign-ins add a row;
 * kept until the sign-in would have expired anyway (its sealed cookie says when). Expired marks are
 * dropped here (by `clock`, or the database's `now()`: src/store/sql-now.ts), so the table stays small
 * without a job.
 */
export async function useState(db: Db, stateHash: Buffer, expiresAt: Date, clock?: Clock): Promise<boolean> {
  await db.deleteFrom('sso_used_states').where('expires_at', '<', sqlNow(clock)).execute();
  const row = await db
    .insertInto('sso_used_states')
    .values({ state_hash: stateHash, expires_at: expiresAt })
    .onConflict((oc) => oc.doNothing())
    .returning('state_hash')
    .executeTakeFirst();
  return row !== undefined;
}

export async function insertSession(
  db: Db,
  session: {
    tokenHash: Buffer;
    organizationId: string;
    issuer: string;
    subject: string;
    email: string | null;
    emailVerified: boolean;
    name: string | null;
    groups: readonly string[];
    ttlMs: number;
  },
  clock?: Clock,
) {
  return db
    .insertInto('sso_sessions')
    .values({
      id: randomUUID(),
      token_hash: session.tokenHash,
      organization_id: session.organizationId,
      issuer: session.issuer,
      subject: session.subject,
      email: session.email,
      email_verified: session.emailVerified,
      name: session.name,
      groups: json(session.groups),
      expires_at: sql<Date>`${sqlNow(clock)} + make_interval(secs => ${session.ttlMs / 1000})`,
    })
    .returning(['id', 'expires_at'])
    .executeTakeFirstOrThrow();
}

/**
 * Sessions over for more than 90 days (the default event retention): gone with their audit lines. Run
 * at each sign-in, so the table stays small without a job of its own.
 */
export async function pruneOldSessions(db: Db, clock?: Clock): Promise<void> {
  await db
    .deleteFrom('sso_sessions')
    .where(sql<Date>`coalesce(ended_at, expires_at)`, '<', sql<Date>`${sqlNow(clock)} - interval '90 days'`)
    .execute();
}

const SESSION_COLUMNS = [
  'id',
  'organization_id',
  'issuer',
  'subject',
  'email',
  'email_verified',
  'name',
  'groups',
  'created_at',
  'expires_at',
] as const;

/**
 * The session of a token, while it lasts and has not been ended. Sessions are dated, and their expiry
 * judged, by the database's `now()`, or by `clock` (the service's, src/clock.ts) when given one.
 */
export function findLiveSession(db: Db, tokenHash: Buffer, clock?: Clock) {
  return db
    .selectFrom('sso_sessions')
    .select(SESSION_COLUMNS)
    .where('token_hash', '=', tokenHash)
    .where('ended_at', 'is', null)
    .where('expires_at', '>', sqlNow(clock))
    .executeTakeFirst();
}

export type SessionRow = NonNullable<Awaited<ReturnType<typeof findLiveSession>>>;

/** Ends a live session (by its token, or by id within an organization); the ended row, or undefined. */
export function endSession(db: Db, by: { tokenHash: Buffer } | { id: string; organizationId: string }, clock?: Clock) {
  const now = sqlNow(clock);
  let query = db
    .updateTable('sso_sessions')
    .set({ ended_at: now })
    .where('ended_at', 'is', null)
    .where('expires_at', '>', now);
  query =
    'tokenHash' in by
      ? query.where('token_hash', '=', by.tokenHash)
      : query.where('id', '=', by.id).where('organization_id', '=', by.organizationId);
  return query.returning(SESSION_COLUMNS).executeTakeFirst();
}

export function listLiveSessions(db: Db, organizationId: string, limit: number, offset: number, clock?: Clock) {
  return db
    .selectFrom('sso_sessions')
    .select(SESSION_COLUMNS)
    .where('organization_id', '=', organizationId)
    .where('ended_at', 'is', null)
    .where('expires_at', '>', sqlNow(clock))
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

/** The organization's first workspace: where its organization-wide audit lines go. */
export async function firstWorkspaceOf(db: Db, organizationId: string): Promise<string> {
  const row = await db
    .selectFrom('workspaces')
    .select('id')
    .where('organization_id', '=', organizationId)
    .orderBy('created_at')
    .orderBy('id')
    .executeTakeFirst();
  // An organization always has a workspace (the first start makes one, and none is ever deleted).
  if (row === undefined) throw new Error(`Organization ${organizationId} has no workspace to record an event in`);
  return row.id;
}

/** The organization's workspaces by id and name (a person's access names them). */
export function workspacesOf(db: Db, organizationId: string) {
  return db
    .selectFrom('workspaces')
    .select(['id', 'name'])
    .where('organization_id', '=', organizationId)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

/** An audit line of single sign-on (subject sso_session or sso_mapping), in the events table. */
export async function recordSsoEvent(
  db: Db,
  event: {
    workspaceId: string;
    subjectType: 'sso_session' | 'sso_mapping';
    subjectId: string;
    type: EventType;
    data: Record<string, unknown>;
  },
): Promise<void> {
  await db
    .insertInto('events')
    .values({
      workspace_id: event.workspaceId,
      subject_type: event.subjectType,
      subject_id: event.subjectId,
      type: event.type,
      data: json(event.data),
    })
    .execute();
}
