/**
 * Every write a signed-in person makes is audited under that person (docs/events.md,
 * `sso_session.write`): one event per request with a method other than GET, HEAD and OPTIONS that a
 * session opened and that succeeded, naming the person (issuer, subject, e-mail), the operation, the
 * path, the status and the request id. Written before the answer leaves (onSend), so a person never
 * sees a change done whose audit line is missing; the services' own events of the change name the
 * session as `by_key` as well. A retry that gets the first answer again (src/http/idempotency.ts,
 * `Idempotent-Replayed`) changed nothing and is not audited again: the first request's line stands.
 */
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { REPLAYED_HEADER } from '../http/idempotency.ts';
import type { Database } from '../store/schema.ts';
import { firstWorkspaceOf, recordSsoEvent } from './sso-store.ts';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export function registerSessionAudit(app: FastifyInstance, db: Kysely<Database>): void {
  app.addHook('onSend', async (request, reply, payload) => {
    const person = request.caller?.person;
    if (person === undefined || SAFE_METHODS.has(request.method) || reply.statusCode >= 400) return payload;
    if (reply.getHeader(REPLAYED_HEADER) !== undefined) return payload;
    const workspaceId = request.caller.workspaceId ?? (await firstWorkspaceOf(db, request.caller.organizationId));
    await recordSsoEvent(db, {
      workspaceId,
      subjectType: 'sso_session',
      subjectId: person.sessionId,
      type: 'sso_session.write',
      data: {
        issuer: person.issuer,
        subject: person.subject,
        email: person.email,
        name: person.name,
        method: request.method,
        operation: `${request.method} ${request.routeOptions.url ?? ''}`,
        path: request.url.split('?')[0]!.slice(0, 1024),
        status: reply.statusCode,
        request_id: request.id,
        workspace_id: request.caller.workspaceId,
      },
    });
    return payload;
  });
}
