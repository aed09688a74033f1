/**
 * API-key authentication and workspace resolution (contract.md, "Authentication and tenancy").
 * Routes declare `config.auth`: 'workspace' (default: the request acts in one workspace),
 * 'organization' (the key's organization is enough), or 'none'; `config.admin` asks for the admin role.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { hashApiKey } from '../auth/api-keys.ts';
import { AppError, ValidationError } from '../errors.ts';
import type { Db } from '../store/schema.ts';
import { findActiveKeyByHash, firstWorkspaceIds, workspaceInOrganization } from '../store/tenancy.ts';

export interface Caller {
  keyId: string;
  keyName: string;
  organizationId: string;
  /** The key's own workspace; null for an organization key. */
  keyWorkspaceId: string | null;
  role: 'admin' | 'member';
  /** The workspace this request acts in; null only on 'organization' routes without X-Tenant-Id. */
  workspaceId: string | null;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: 'workspace' | 'organization' | 'none';
    admin?: boolean;
  }
  interface FastifyRequest {
    caller: Caller;
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
    throw new ValidationError([{ type: 'uuid_parsing', loc: ['header', 'x-tenant-id'], msg: 'Input should be a valid UUID', input: value }]);
  }
  return value.trim().toLowerCase();
}

async function resolveCaller(db: Db, request: FastifyRequest, mode: 'workspace' | 'organization'): Promise<Caller> {
  const key = presentedKey(request);
  if (key === null) throw new AppError('unauthenticated', 'Missing API key: send X-Api-Key or Authorization: Bearer.');
  const record = key.length <= 512 ? await findActiveKeyByHash(db, hashApiKey(key)) : undefined;
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
    if (asked !== null && asked !== record.workspace_id) throw new AppError('forbidden', 'This API key does not belong to the workspace in X-Tenant-Id.');
    return caller;
  }
  if (asked !== null) {
    if (!(await workspaceInOrganization(db, asked, record.organization_id))) {
      throw new AppError('forbidden', 'The workspace in X-Tenant-Id is not part of this API key\'s organization.');
    }
    return { ...caller, workspaceId: asked };
  }
  const workspaces = await firstWorkspaceIds(db, record.organization_id);
  if (workspaces.length === 1) return { ...caller, workspaceId: workspaces[0]! };
  if (mode === 'organization') return caller;
  throw new AppError('workspace_required', 'This organization API key requires workspace specification: send X-Tenant-Id.');
}

export function registerAuthentication(app: FastifyInstance, db: Db): void {
  app.decorateRequest('caller', null as unknown as Caller);
  app.addHook('onRequest', async (request) => {
    const config = request.routeOptions.config;
    const mode = config?.auth ?? 'workspace';
    // Routes not found have no config; let the not-found handler answer them.
    if (mode === 'none' || request.is404) return;
    request.caller = await resolveCaller(db, request, mode);
    if (config?.admin && request.caller.role !== 'admin') throw new AppError('forbidden', 'This operation needs an admin API key.');
  });
}

/** The workspace of a 'workspace' route: always set there by the hook above. */
export function workspaceOf(request: FastifyRequest): string {
  const id = request.caller.workspaceId;
  if (id === null) throw new AppError('workspace_required', 'This organization API key requires workspace specification: send X-Tenant-Id.');
  return id;
}
