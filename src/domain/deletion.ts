/**
 * Who finishes a deployment's deletion: the one rule, which the delete (src/service/lifecycle.ts
 * `startDeletion`), the own worker's claim (src/store/work-leases.ts `claimDeploymentToDelete`, SQL
 * checked against this module by test/domain/deletion.test.ts), the listener's desired state
 * (`delete: true`) and a data plane's confirmation (`confirmDeletion` of src/domain/data-plane.ts) all
 * follow. Pure: no I/O.
 *
 * Glossary
 * - finisher: who ends a deletion, removing the deployment's row: the delete itself, when the
 *   deployment's data plane holds nothing of it, or that data plane once it has torn everything down.
 * - being deleted: a deployment in AWAITING_DELETE, the only status a deletion waits in.
 */
import type { DataPlaneKind, DeploymentStatus } from './states.ts';

/** The status a deployment waits in while its data plane tears it down. */
export const DELETING_STATUS = 'AWAITING_DELETE' as const satisfies DeploymentStatus;

/** Who ends a deletion: the delete request itself, or the data plane that runs the deployment. */
export type DeletionFinisher = 'delete' | DataPlaneKind;

/** The data plane that runs a deployment: its listener when it names one, else the own worker. */
export function dataPlaneOf(deployment: { listener_id: string | null }): DataPlaneKind {
  return deployment.listener_id === null ? 'local' : 'listener';
}

export interface DeletionFacts {
  listener_id: string | null;
  /**
   * The deployment's data plane may hold something of it. The own data plane: it has a database or
   * app files, or a worker claimed one of its revisions. A listener: it has ever called (it may have
   * applied the deployment in its cluster), since nothing else tells what it holds.
   */
  dataPlaneMayHoldIt: boolean;
}

/** At the delete: who ends the deletion. The delete ends it at once when there is nothing to tear down. */
export function deletionFinisher(facts: DeletionFacts): DeletionFinisher {
  return facts.dataPlaneMayHoldIt ? dataPlaneOf(facts) : 'delete';
}

/**
 * Who ends the deletion of a deployment that is still there: the data plane that runs it when it is
 * being deleted (a deletion the delete ended has no row left), else nobody (null).
 */
export function pendingDeletionFinisher(deployment: {
  status: DeploymentStatus;
  listener_id: string | null;
}): DataPlaneKind | null {
  return deployment.status === DELETING_STATUS ? dataPlaneOf(deployment) : null;
}

/** A data plane confirming a deletion: the own worker, or one listener. */
export type DeletionConfirmer = { kind: 'local' } | { kind: 'listener'; listenerId: string };

/**
 * Whether a data plane's confirmation ends this deployment's deletion: `finish`; `not_theirs` when
 * another data plane runs it (answered as not found: it is not this data plane's to see); `not_deleting`
 * when it is not being deleted (a conflict).
 */
export function deletionConfirmation(
  deployment: { status: DeploymentStatus; listener_id: string | null },
  by: DeletionConfirmer,
): 'finish' | 'not_theirs' | 'not_deleting' {
  const theirs = by.kind === 'local' ? deployment.listener_id === null : deployment.listener_id === by.listenerId;
  if (!theirs) return 'not_theirs';
  return pendingDeletionFinisher(deployment) === by.kind ? 'finish' : 'not_deleting';
}
