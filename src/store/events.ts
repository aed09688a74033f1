/** The event log: one row per state transition or other audited change. */
import type { EventType } from '../domain/event-types.ts';
import { json, type Db } from './schema.ts';

export interface EventInput {
  workspaceId: string;
  subjectType:
    | 'deployment'
    | 'revision'
    | 'listener'
    | 'api_key'
    | 'workspace'
    | 'oauth_provider'
    | 'oauth_token'
    | 'oauth_authorization'
    | 'agent_connection'
    | 'agent_credential'
    | 'protocol_credential'
    | 'codehost_integration';
  subjectId: string;
  deploymentId?: string | null;
  /** Registered in src/domain/event-types.ts. */
  type: EventType;
  fromStatus?: string | null;
  toStatus?: string | null;
  data?: Record<string, unknown>;
}

export async function recordEvents(db: Db, events: EventInput[]): Promise<void> {
  if (events.length === 0) return;
  await db
    .insertInto('events')
    .values(
      events.map((e) => ({
        workspace_id: e.workspaceId,
        subject_type: e.subjectType,
        subject_id: e.subjectId,
        deployment_id: e.deploymentId ?? null,
        type: e.type,
        from_status: e.fromStatus ?? null,
        to_status: e.toStatus ?? null,
        data: json(e.data ?? {}),
      })),
    )
    .execute();
}

/** A deployment's events and its revisions' (each carries deployment_id), oldest first. */
export async function listDeploymentEvents(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  limit: number,
  offset: number,
  order: 'asc' | 'desc' = 'asc',
) {
  return db
    .selectFrom('events')
    .select([
      'id',
      'subject_type',
      'subject_id',
      'deployment_id',
      'type',
      'from_status',
      'to_status',
      'data',
      'created_at',
    ])
    .where('workspace_id', '=', workspaceId)
    .where('deployment_id', '=', deploymentId)
    .orderBy('id', order)
    .limit(limit)
    .offset(offset)
    .execute();
}
