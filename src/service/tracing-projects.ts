/**
 * Tracing projects: one per deployment name in a workspace, made with the deployment
 * (src/service/deployments.ts) and kept when it goes unless its delete asks otherwise.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.ts';
import { listTracingProjects } from '../store/tracing-projects.ts';
import type { Page } from './page.ts';

export interface TracingProjectServiceDeps {
  db: Kysely<Database>;
}

export function createTracingProjectService({ db }: TracingProjectServiceDeps) {
  return {
    /** Newest first. */
    list: (workspaceId: string, page: Page) => listTracingProjects(db, workspaceId, page.limit, page.offset),
  };
}

export type TracingProjectService = ReturnType<typeof createTracingProjectService>;
