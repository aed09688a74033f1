/**
 * The conditions a data plane reports of a deployment's serving revision, and what each does to the
 * deployment's status: one table for both data planes (the own data plane's runtime and a listener's
 * heartbeat), applied by the lifecycle (src/service/lifecycle.ts, applyCondition). A data plane names
 * the condition; the status it moves to and the statuses it may move from are read here only, so a
 * condition cannot follow two rules. docs/lifecycle.md ("Conditions") lists them.
 *
 * The rule, and why: a condition speaks of the revision that serves, so it moves only a deployment
 * that one serves (READY) and brings it back from UNKNOWN only; `recovered` returns the deployment to
 * READY, so it must only ever have left READY.
 * - A deployment whose next revision is on its way (DEPLOYING) while another serves is READY: the
 *   serving one crash-looping makes it UNKNOWN, since what answers its users is not healthy, whatever
 *   comes next. The revision on its way tells its own outcome (DEPLOYED, or DEPLOY_FAILED with
 *   `health_check_failed` or `crash_loop`).
 * - A deployment nothing has served yet (AWAITING_DATABASE, UNUSED) has no serving revision to be
 *   unhealthy: a crash told there comes from a revision that is only becoming the active one (a race),
 *   and UNKNOWN, then `recovered`'s READY, would claim it had served.
 * - `scaled_to_zero` and `scaled_up` are the own data plane's pause (`resource_spec.min_scale: 0`): a
 *   paused deployment is UNUSED, since nothing answers at its URL. `scaled_up` leaves UNUSED only, so
 *   a paused deployment whose app is unhealthy (UNKNOWN) is not said to be paused or serving by them.
 * - A deployment being deleted (AWAITING_DELETE) stays so: the user asked for it to go, it goes
 *   whatever its app does, and no status leads out of AWAITING_DELETE but the row's removal.
 */
import type { DataPlaneKind, DeploymentStatus } from './states.ts';

export interface ConditionRule {
  /** The status the condition moves the deployment to. */
  readonly status: DeploymentStatus;
  /** The only statuses it moves the deployment from (in any other, the condition changes nothing). */
  readonly from: readonly DeploymentStatus[];
  /** The data planes that report it (a listener's come from its agent's heartbeat). */
  readonly reportedBy: readonly DataPlaneKind[];
}

const CONDITION_TABLE = {
  /** An instance of the serving revision keeps crashing (own: 5 crashes in a row; listener: CrashLoopBackOff). */
  crash_loop: { status: 'UNKNOWN', from: ['READY'], reportedBy: ['local', 'listener'] },
  /** The serving revision could not be started again after the service restarted. */
  restart_failed: { status: 'UNKNOWN', from: ['READY'], reportedBy: ['local'] },
  /** The serving app went over its disk limit and its instances were stopped. */
  disk_full: { status: 'UNKNOWN', from: ['READY'], reportedBy: ['local'] },
  /** The serving revision is healthy again. */
  recovered: { status: 'READY', from: ['UNKNOWN'], reportedBy: ['local', 'listener'] },
  /** The deployment's database was made for its first revision, which is not deployed yet. */
  database_ready: { status: 'UNUSED', from: ['AWAITING_DATABASE'], reportedBy: ['local'] },
  /** The serving revision's web instances were all stopped: `resource_spec.min_scale` is 0 (paused). */
  scaled_to_zero: { status: 'UNUSED', from: ['READY'], reportedBy: ['local'] },
  /** A paused deployment's serving revision runs a healthy web instance again (`min_scale` 1 or more). */
  scaled_up: { status: 'READY', from: ['UNUSED'], reportedBy: ['local'] },
} as const satisfies Record<string, ConditionRule>;

/** A condition's name: the `reason` of the `deployment.status_changed` event it writes. */
export type DeploymentConditionName = keyof typeof CONDITION_TABLE;

/** Every condition and its rule. */
export const DEPLOYMENT_CONDITIONS: Readonly<Record<DeploymentConditionName, ConditionRule>> = CONDITION_TABLE;

export const DEPLOYMENT_CONDITION_NAMES = Object.keys(CONDITION_TABLE) as DeploymentConditionName[];

/** Where the condition moves a deployment in status `from`; null when it changes nothing. */
export function conditionMove(condition: DeploymentConditionName, from: DeploymentStatus): DeploymentStatus | null {
  const rule = DEPLOYMENT_CONDITIONS[condition];
  return rule.status !== from && rule.from.includes(from) ? rule.status : null;
}
