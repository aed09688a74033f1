/**
 * Listeners and the credentials of their agents: each write checks its rules and stores the change
 * with its audit event in one transaction. The listener protocol itself is
 * src/service/listener-protocol.ts; the HTTP side is src/routes/listeners.ts.
 */
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import { newCredential } from '../auth/credentials.ts';
import { AppError, notFound } from '../errors.ts';
import { recordEvents } from '../store/events.ts';
import {
  insertListenerCredential,
  listListenerCredentials,
  revokeListenerCredential,
  type ListenerCredentialView,
} from '../store/listener-credentials.ts';
import {
  deleteListener,
  deploymentsUsingListener,
  getListener,
  insertListener,
  listListeners,
  lockListener,
  shareLockListener,
  updateListener,
  type ListenerView,
} from '../store/listeners.ts';
import type { Database, Db } from '../store/schema.ts';
import type { Page } from './page.ts';
import type { WriteConditions } from './preconditions.ts';

export interface ListenerServiceDeps {
  db: Kysely<Database>;
  /** What a listener's state is judged against (src/store/listeners.ts); the database's `now()` when absent. */
  now?: Clock;
}

export interface CreateListenerInput {
  compute_type: string;
  compute_id: string;
  compute_config?: { k8s_namespaces?: string[] | null } | null;
  version?: string | null;
}

/** compute_type and compute_id may be sent, but only with their current values. */
export interface PatchListenerInput {
  compute_type?: unknown;
  compute_id?: unknown;
  compute_config?: { k8s_namespaces?: string[] | null } | null;
  version?: string | null;
}

/** The namespaces of a listener created without any. */
const DEFAULT_NAMESPACES = ['default'];

export function createListenerService({ db, now }: ListenerServiceDeps) {
  async function get(workspaceId: string, id: string, from: Db = db): Promise<ListenerView> {
    const row = await getListener(from, workspaceId, id, now);
    if (!row) throw notFound('Listener', id);
    return row;
  }

  return {
    get,

    list: (workspaceId: string, page: Page): Promise<ListenerView[]> =>
      listListeners(db, workspaceId, page.limit, page.offset, now),

    async create(workspaceId: string, input: CreateListenerInput): Promise<ListenerView> {
      return db.transaction().execute(async (tx) => {
        const created = await insertListener(
          tx,
          {
            workspaceId,
            computeType: input.compute_type,
            computeId: input.compute_id,
            namespaces: input.compute_config?.k8s_namespaces ?? DEFAULT_NAMESPACES,
            version: input.version ?? null,
          },
          now,
        );
        if (!created)
          throw new AppError(
            'conflict',
            `A listener with compute_id '${input.compute_id}' already exists in this workspace.`,
          );
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'listener',
            subjectId: created.id,
            type: 'listener.created',
            data: { compute_id: created.compute_id },
          },
        ]);
        return created;
      });
    },

    /** Changes version and namespaces; a namespace still used by a deployment cannot be removed. */
    async patch(
      workspaceId: string,
      id: string,
      input: PatchListenerInput,
      conditions: WriteConditions = {},
    ): Promise<ListenerView> {
      return db.transaction().execute(async (tx) => {
        const current = await lockListener(tx, workspaceId, id, now);
        if (!current) throw notFound('Listener', id);
        await conditions.precondition?.(tx);
        if (input.compute_type !== undefined && input.compute_type !== current.compute_type)
          throw new AppError('field_immutable', 'compute_type cannot be changed after creation');
        if (input.compute_id !== undefined && input.compute_id !== current.compute_id)
          throw new AppError('field_immutable', 'compute_id cannot be changed after creation');
        const namespaces = input.compute_config?.k8s_namespaces ?? undefined;
        if (namespaces) {
          const stranded = (await deploymentsUsingListener(tx, id)).filter(
            (d) => d.k8s_namespace !== null && !namespaces.includes(d.k8s_namespace),
          );
          if (stranded.length > 0) {
            throw new AppError(
              'conflict',
              `Namespace '${stranded[0]!.k8s_namespace}' is used by deployment '${stranded[0]!.name}' and cannot be removed from the listener.`,
            );
          }
        }
        const updated = await updateListener(tx, id, { namespaces, version: input.version }, now);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'listener',
            subjectId: id,
            type: 'listener.updated',
            data: { fields: Object.keys(input).filter((k) => k === 'version' || k === 'compute_config') },
          },
        ]);
        return updated;
      });
    },

    /** Refused (conflict) while deployments use it. */
    async remove(workspaceId: string, id: string, conditions: WriteConditions = {}): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const current = await lockListener(tx, workspaceId, id, now);
        if (!current) throw notFound('Listener', id);
        await conditions.precondition?.(tx);
        const users = await deploymentsUsingListener(tx, id);
        if (users.length > 0)
          throw new AppError(
            'conflict',
            `Listener ID ${id} is used by ${users.length} deployment(s), e.g. '${users[0]!.name}'; delete them first.`,
          );
        await deleteListener(tx, id);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'listener',
            subjectId: id,
            type: 'listener.deleted',
            data: { compute_id: current.compute_id },
          },
        ]);
      });
    },

    // ----- credentials of the listener's agent (docs/listener-protocol.md, "Authentication") -----

    ...agentAccessOperations(db, get),
  };
}

/**
 * The agent's access to its listener: its credentials (made, listed, revoked) and the audit of an API key
 * reading the desired state in its place.
 */
function agentAccessOperations(
  db: Kysely<Database>,
  get: (workspaceId: string, id: string, from?: Db) => Promise<ListenerView>,
) {
  return {
    /** A new credential for the listener's agent; `credential` is the only copy of the secret. */
    async createCredential(
      workspaceId: string,
      listenerId: string,
      byKey: string,
    ): Promise<{ row: ListenerCredentialView; credential: string }> {
      const { value: credential, hash: credentialHash, prefix: credentialPrefix } = newCredential('listener');
      const row = await db.transaction().execute(async (tx) => {
        // A share lock: the listener cannot be deleted before its credential is stored.
        if (!(await shareLockListener(tx, workspaceId, listenerId))) throw notFound('Listener', listenerId);
        const created = await insertListenerCredential(tx, {
          workspaceId,
          listenerId,
          hash: credentialHash,
          prefix: credentialPrefix,
          createdBy: byKey,
        });
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'listener',
            subjectId: listenerId,
            type: 'listener.credential_created',
            data: { credential_id: created.id, credential_prefix: created.credential_prefix, by_key: byKey },
          },
        ]);
        return created;
      });
      return { row, credential };
    },

    /**
     * An API key read the desired state, its secrets in clear (docs/listener-protocol.md): an audit
     * event on the listener. The listener's own agent reads it all the time, with its credential; that
     * is not recorded.
     */
    async recordDesiredStateRead(workspaceId: string, listenerId: string, byKey: string): Promise<void> {
      await recordEvents(db, [
        {
          workspaceId,
          subjectType: 'listener',
          subjectId: listenerId,
          type: 'listener.desired_state_read',
          data: { by_key: byKey },
        },
      ]);
    },

    async listCredentials(workspaceId: string, listenerId: string, page: Page): Promise<ListenerCredentialView[]> {
      await get(workspaceId, listenerId);
      return listListenerCredentials(db, listenerId, page.limit, page.offset);
    },

    async revokeCredential(
      workspaceId: string,
      listenerId: string,
      credentialId: string,
      byKey: string,
    ): Promise<void> {
      await db.transaction().execute(async (tx) => {
        if (!(await getListener(tx, workspaceId, listenerId))) throw notFound('Listener', listenerId);
        const revoked = await revokeListenerCredential(tx, listenerId, credentialId);
        if (!revoked) throw notFound('Listener credential', credentialId);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'listener',
            subjectId: listenerId,
            type: 'listener.credential_revoked',
            data: { credential_id: credentialId, credential_prefix: revoked.credential_prefix, by_key: byKey },
          },
        ]);
      });
    },
  };
}

export type ListenerService = ReturnType<typeof createListenerService>;
