/**
 * The worker moved to src/dataplane/local-worker.ts (it is the own data plane's agent, as the listener
 * is a cluster's). Debt: bench/data-plane-service.ts still imports the Worker type from here; remove
 * this file once it imports it from src/domain/data-plane.ts.
 */
export type { Worker } from '../domain/data-plane.ts';
