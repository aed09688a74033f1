/**
 * A deployment's status badge with why it has that status beside it (packages/sdk/src/deployment-status.ts):
 * "awaiting database" alone reads as wrong for a deployment whose only revision failed to build, or
 * that waits for its listener. `label` names the pair where no column header does (a page's title).
 */
import { StatusBadge } from './status-badge.tsx';

export function DeploymentStatus({ status, why, label }: { status: string; why: string | undefined; label?: string }) {
  return (
    <div class="deployment-status" {...(label ? { role: 'group', 'aria-label': label } : {})}>
      <StatusBadge status={status} />
      {why && <span class="status-why breakable">{why}</span>}
    </div>
  );
}
