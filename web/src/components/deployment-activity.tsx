/**
 * What happened to a deployment lately: its newest events (GET .../events?order=desc), in words. The
 * page passes `changed` (the deployment's status and update time), so the list reloads when it moves.
 */
import { data } from '../api/client.ts';
import type { DeploymentEvent } from '../api/types.ts';
import { useApp, useResource } from '../hooks.ts';
import { ErrorNotice } from './notice.tsx';
import { Time } from './time.tsx';

const SHOWN = 10;

const short = (id: unknown) => (typeof id === 'string' ? id.slice(0, 8) : '');
const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value : null);

/** Web and worker counts of a `deployment.scaled` event's `to`. */
function counts(value: unknown): string {
  const c = (value ?? {}) as { web?: unknown; worker?: unknown };
  const web = typeof c.web === 'number' ? c.web : '?';
  return `${web} web${typeof c.worker === 'number' && c.worker > 0 ? `, ${c.worker} worker` : ''}`;
}

/**
 * One line a person reads, and the reason or message behind it when there is one. A case for every
 * `deployment.*` and `revision.*` type of the service's event registry (docs/events.md; a test checks
 * it); the default shows a type this build does not know yet by its name.
 */
export function describeEvent(e: DeploymentEvent): { what: string; why: string | null } {
  const why = text(e.data.message) ?? text(e.data.failure_message) ?? text(e.data.reason);
  switch (e.type) {
    case 'deployment.created':
      return { what: 'Deployment created', why: null };
    case 'revision.created':
      return { what: `Revision ${short(e.subject_id)} created`, why: null };
    case 'revision.status_changed':
      return { what: `Revision ${short(e.subject_id)}: ${e.to_status ?? ''}`, why };
    case 'deployment.status_changed':
      return { what: `Deployment ${e.to_status ?? ''}`, why };
    case 'deployment.active_revision_changed':
      return { what: `Now serving revision ${short(e.data.to)}`, why: text(e.data.url) };
    case 'deployment.database_created':
      return { what: 'Database created', why: null };
    case 'deployment.updated':
      return {
        what: `Updated: ${Array.isArray(e.data.fields) ? e.data.fields.join(', ') : 'settings'}`,
        why: null,
      };
    case 'deployment.app_exited':
      return { what: 'An app instance exited', why };
    case 'deployment.disk_full':
      return { what: 'Stopped: its disk limit was reached', why };
    case 'deployment.database_full':
      return { what: 'Database read-only: its storage limit was reached', why };
    case 'deployment.database_cut_off':
      return { what: 'Database closed to the app: it kept writing past its limit', why };
    case 'deployment.database_writable':
      return { what: 'Database writable again', why };
    case 'deployment.scaled':
      return { what: `Scaled to ${counts(e.data.to)}`, why: null };
    case 'deployment.scale_failed':
      return { what: `Scaling to ${counts(e.data.to)} failed`, why };
    case 'deployment.update_failed':
      return { what: 'In-place update failed on the listener', why };
    case 'deployment.update_rolled_out':
      return { what: 'In-place update rolled out', why: null };
    case 'deployment.endpoint_set':
      return {
        what:
          e.data.from_revision_id === null
            ? `Endpoint ${text(e.data.endpoint) ?? ''} created at revision ${short(e.data.to_revision_id)}`
            : `Endpoint ${text(e.data.endpoint) ?? ''} moved from revision ${short(e.data.from_revision_id)} to ${short(e.data.to_revision_id)}`,
        why: null,
      };
    case 'deployment.endpoint_deleted':
      return { what: `Endpoint ${text(e.data.endpoint) ?? ''} deleted`, why: null };
    case 'deployment.endpoint_served':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} serves revision ${short(e.data.revision_id)}`,
        why: null,
      };
    case 'deployment.endpoint_failed':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} could not start revision ${short(e.data.revision_id)}`,
        why,
      };
    case 'deployment.endpoint_split_set':
    case 'deployment.endpoint_split_changed':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} sends ${String(e.data.weight)}% of its clients to revision ${short(e.data.split_revision_id)}`,
        why: null,
      };
    case 'deployment.endpoint_split_ended':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} split with revision ${short(e.data.split_revision_id)} ended (${text(e.data.reason) ?? ''})`,
        why: null,
      };
    case 'deployment.endpoint_split_rolled_back':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} split with revision ${short(e.data.split_revision_id)} rolled back by itself`,
        why: text(e.data.message),
      };
    case 'deployment.endpoint_split_served':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} sends ${String(e.data.weight)}% of its clients to revision ${short(e.data.split_revision_id)} now`,
        why: null,
      };
    case 'deployment.endpoint_split_failed':
      return {
        what: `Endpoint ${text(e.data.endpoint) ?? ''} could not start split revision ${short(e.data.split_revision_id)}`,
        why,
      };
    case 'deployment.preview_built':
      return {
        what: `Preview of pull request #${String(e.data.pull_request)} building (revision ${short(e.data.revision_id)}${e.data.secrets === false ? ', without secrets' : ''})`,
        why: null,
      };
    case 'deployment.preview_refused':
      return { what: `No preview for pull request #${String(e.data.pull_request)}`, why };
    case 'deployment.preview_removed':
      return {
        what: `Preview of pull request #${String(e.data.pull_request)} removed (${e.data.merged === true ? 'merged' : 'closed'})`,
        why: null,
      };
    case 'deployment.preview_status_posted':
      return {
        what: `Pull request #${String(e.data.pull_request)} told: ${text(e.data.state) ?? ''}`,
        why: text(e.data.target_url),
      };
    case 'deployment.preview_settings_changed':
      return { what: 'Preview settings changed', why: null };
    case 'deployment.tags_set':
      return { what: 'Tags set', why: null };
    case 'deployment.deleted':
      return { what: 'Deployment deleted', why: null };
    case 'revision.reported':
      return { what: `Listener reported revision ${short(e.subject_id)}: ${e.to_status ?? ''}`, why };
    default:
      return { what: e.type, why };
  }
}

export function DeploymentActivity({ deploymentId, changed }: { deploymentId: string; changed: string }) {
  const { api } = useApp();
  const events = useResource(
    () =>
      data(
        api.GET('/v2/deployments/{deployment_id}/events', {
          params: { path: { deployment_id: deploymentId }, query: { order: 'desc', limit: SHOWN } },
        }),
      ),
    [deploymentId, changed],
  );
  const list = events.value?.resources ?? [];
  return (
    <>
      <ErrorNotice error={events.error} />
      {list.length === 0 ? (
        <p class="muted">{events.loading ? 'Loading…' : 'Nothing yet.'}</p>
      ) : (
        <ol class="activity" aria-label="Latest events, newest first">
          {list.map((e) => {
            const { what, why } = describeEvent(e);
            return (
              <li key={e.id}>
                <Time iso={e.created_at} /> <span>{what}</span>
                {why && <div class="muted small breakable">{why}</div>}
              </li>
            );
          })}
        </ol>
      )}
    </>
  );
}
