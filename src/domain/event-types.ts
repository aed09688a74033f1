/**
 * Every event type the service writes to the event log (src/store/events.ts) is registered here with
 * its meaning, as error codes are in src/errors.ts: an event's `type` is an `EventType`, so a name
 * that is not in this list does not compile. docs/events.md lists every type; test/domain/event-types
 * keeps the three in step (registered, documented, emitted somewhere in src/) and checks that the
 * dashboard's activity list (web/src/components/deployment-activity.tsx) has words for every type a
 * deployment's event list can hold.
 *
 * A type is `<subject>.<what happened>`; the subject is the event's `subject_type`. Events of a
 * deployment or of one of its revisions carry `deployment_id` and are what
 * `GET /v2/deployments/{id}/events` answers.
 */

export const EVENT_TYPES = {
  // Deployments (subject_type deployment, deployment_id set).
  'deployment.created': { summary: 'A deployment was created, with its first revision.' },
  'deployment.updated': {
    summary:
      'A patch or a redeploy changed the deployment in place; data.fields names what changed (a redeploy adds restored_from_revision and kept_scale).',
  },
  'deployment.status_changed': {
    summary:
      'The deployment moved from from_status to to_status (docs/lifecycle.md); data.reason says why when it is not the plain next step.',
  },
  'deployment.active_revision_changed': {
    summary: 'A DEPLOYED revision became the one serving the deployment; data has from, to and the stable url.',
  },
  'deployment.deleted': {
    summary:
      "The deployment's row was removed: at once, after the own data plane tore it down, or when its listener confirmed the deletion.",
  },
  'deployment.tags_set': { summary: "The deployment's tags were replaced by data.tag_value_ids." },
  'deployment.database_created': {
    summary: "The own data plane made the deployment's PostgreSQL database (data.database).",
  },
  'deployment.app_exited': {
    summary:
      'An instance of the serving app on the own data plane exited; data has its exit code or signal and crashes.',
  },
  'deployment.disk_full': {
    summary:
      "The serving app's data and home directories went over their disk limit (data.limit_bytes, data.used_bytes) and its instances were stopped.",
  },
  'deployment.database_full': {
    summary:
      "The deployment's database went over its storage limit (data.limit_bytes, data.size_bytes) on the own data plane: its new transactions are read-only by default.",
  },
  'deployment.database_cut_off': {
    summary:
      "The deployment's app lifted read-only and kept writing, past its storage limit by data.margin_bytes: its database role may not log in until the database is within its limit.",
  },
  'deployment.database_writable': {
    summary:
      "The deployment's database is within its storage limit again (room made, or the limit raised): it takes writes again (data.from: read_only or cut_off).",
  },
  'deployment.scaled': {
    summary: 'The own data plane started or stopped instances in place to match resource_spec (data.from, data.to).',
  },
  'deployment.scale_failed': {
    summary: 'New instances for a changed resource_spec did not become healthy; the old ones keep serving.',
  },
  'deployment.update_failed': {
    summary: 'The listener reported that an in-place change was refused by the cluster or did not roll out.',
  },
  'deployment.update_rolled_out': {
    summary: 'An in-place change that had failed on the listener is in place now (or was replaced).',
  },
  'deployment.endpoint_set': {
    summary:
      'An endpoint was created or moved (data.endpoint, data.from_revision_id (null when created), data.to_revision_id, data.by: the API key).',
  },
  'deployment.endpoint_deleted': {
    summary:
      'An endpoint was deleted (data.endpoint, data.from_revision_id, data.by: the API key); its instances stop.',
  },
  'deployment.endpoint_served': {
    summary:
      "The own data plane serves data.revision_id at the endpoint now (its instances healthy, the route switched, data.from_revision_id's drained); or a listener (data.listener_id) does: the endpoint's Kubernetes Deployment rolled out.",
  },
  'deployment.endpoint_failed': {
    summary:
      'The own data plane could not start data.revision_id at the endpoint (data.message); what served there before keeps serving. From a listener (data.listener_id): its rollout failed, a manifest was refused, or the split of the endpoint cannot be served on that cluster (data.message says why).',
  },
  'deployment.endpoint_split_set': {
    summary:
      "A traffic split began at an endpoint (data.endpoint, data.revision_id: the endpoint's, data.split_revision_id, data.weight: its percent of clients, data.rollback: the automatic rollback's settings or null, data.by: the API key).",
  },
  'deployment.endpoint_split_changed': {
    summary:
      "An endpoint's traffic split changed (data.endpoint, data.split_revision_id, data.weight, data.rollback, data.from_split_revision_id, data.from_weight, data.by).",
  },
  'deployment.endpoint_split_ended': {
    summary:
      "An endpoint's traffic split ended (data.endpoint, data.split_revision_id, data.weight, data.reason: removed, promoted (the endpoint moved to the split's revision) or moved (to another), data.to_revision_id, data.by); every client goes to the endpoint's revision.",
  },
  'deployment.endpoint_split_rolled_back': {
    summary:
      "The automatic rollback took an endpoint's traffic split back (data.endpoint, data.split_revision_id, data.reason: error_rate or latency, data.message, data.base and data.split: requests, error_rate and p99_ms of each over the window).",
  },
  'deployment.endpoint_split_served': {
    summary:
      "The own data plane sends data.weight percent of the endpoint's clients to data.split_revision_id now (its instances healthy).",
  },
  'deployment.endpoint_split_failed': {
    summary:
      "The own data plane could not start the split's revision data.split_revision_id at the endpoint (data.message); the endpoint's revision keeps all its traffic.",
  },
  'deployment.preview_built': {
    summary:
      "A pull request's preview was asked for (data.pull_request, data.endpoint, data.head_sha, data.revision_id, data.from_fork, data.secrets: whether it runs with the deployment's secrets); the revision is built and served at the endpoint, never at the deployment's own URL.",
  },
  'deployment.preview_refused': {
    summary:
      "A pull request got no preview (data.pull_request, data.reason: preview_limit, previews_off, quota_exceeded (a new preview would take the workspace over its quota), endpoint_name or no_revision; data.message); the pull request's commit status says so.",
  },
  'deployment.preview_removed': {
    summary:
      'A pull request was closed or merged (data.pull_request, data.endpoint, data.merged): its preview endpoint and instances go, its unfinished revision is interrupted.',
  },
  'deployment.preview_status_posted': {
    summary:
      "A commit status was posted to a preview's pull request (data.pull_request, data.sha, data.state: pending, success, failure or error, data.target_url).",
  },
  'deployment.preview_settings_changed': {
    summary: "The deployment's preview settings changed (data.max_previews, data.fork_secrets, data.by: the API key).",
  },
  // Revisions (subject_type revision, deployment_id set).
  'revision.created': {
    summary:
      'A revision was made; data.cause says by what (create, patch, secrets_changed, redeploy, push, pull_request: a preview).',
  },
  'revision.status_changed': {
    summary:
      'The revision moved from from_status to to_status (docs/lifecycle.md); a failure carries data.reason and data.message.',
  },
  'revision.reported': {
    summary: "A listener's status report for the revision was applied; to_status is the reported status.",
  },
  // Listeners (subject_type listener).
  'listener.created': { summary: 'A listener was registered.' },
  'listener.updated': { summary: "A listener's settings were changed." },
  'listener.deleted': { summary: 'A listener was deleted.' },
  'listener.credential_created': { summary: 'A listener credential was made (its secret is shown once).' },
  'listener.credential_revoked': { summary: 'A listener credential was revoked.' },
  'listener.desired_state_read': {
    summary: "An API key (data.by_key), not the listener's own credential, read the listener's desired state.",
  },
  'listener.agent_changed': {
    summary: "A heartbeat brought another agent version or other watched namespaces than the listener's last one.",
  },
  // API keys and workspaces.
  'api_key.created': { summary: 'An API key was made (its secret is shown once).' },
  'api_key.revoked': { summary: 'An API key was revoked.' },
  'workspace.created': { summary: 'A workspace was created.' },
  'workspace.quota_changed': {
    summary: "An organization admin changed a workspace's quota (data.quota: the quota now, data.by_key).",
  },
  // OAuth providers, authorizations and tokens.
  'oauth_provider.created': { summary: 'An OAuth provider was configured.' },
  'oauth_provider.updated': { summary: "An OAuth provider's settings were changed." },
  'oauth_provider.deleted': { summary: 'An OAuth provider was deleted.' },
  'oauth_authorization.started': { summary: 'An authorization-code flow against a provider was started.' },
  'oauth_authorization.completed': { summary: 'An authorization-code flow ended with a token.' },
  'oauth_authorization.failed': {
    summary: 'An authorization-code flow ended without a token; data.reason and data.message say why.',
  },
  'oauth_token.created': { summary: "An OAuth token was stored (encrypted) from a provider's answer." },
  'oauth_token.refreshed': { summary: 'An OAuth token was refreshed at its provider.' },
  'oauth_token.refresh_failed': { summary: 'Refreshing an OAuth token at its provider failed.' },
  'oauth_token.deleted': { summary: 'An OAuth token was deleted (and revoked at its provider when it could be).' },
  // Agent connections and credentials.
  'agent_connection.created': { summary: 'An agent connection over an OAuth token was made.' },
  'agent_connection.deleted': { summary: 'An agent connection was deleted.' },
  'agent_credential.created': { summary: 'An agent credential was made (its secret is shown once).' },
  'agent_credential.revoked': { summary: 'An agent credential was revoked.' },
  'protocol_credential.created': {
    summary: "A protocol credential for a deployment's MCP and A2A endpoints was made (its secret is shown once).",
  },
  'protocol_credential.revoked': { summary: 'A protocol credential was revoked.' },
  // Code-host integrations.
  'codehost_integration.created': { summary: 'A code-host integration was created.' },
  'codehost_integration.updated': { summary: "A code-host integration's settings or credentials were changed." },
  'codehost_integration.deleted': { summary: 'A code-host integration was deleted.' },
  // Single sign-on (subject_type sso_session or sso_mapping; docs/operations.md, "Single sign-on").
  'sso_session.created': {
    summary: 'A person signed in to the dashboard through the identity provider; data names them and their access.',
  },
  'sso_session.ended': {
    summary:
      'A sign-in session ended before its time: data.reason is logout, signed_in_again or ended_by_admin (data.by_key).',
  },
  'sso_session.write': {
    summary:
      'A signed-in person made a change; data names the person, the operation, the path, the status and the request id.',
  },
  'sso_mapping.created': { summary: 'An organization admin mapped a group or e-mail domain to a workspace role.' },
  'sso_mapping.deleted': {
    summary: 'A single sign-on mapping was deleted; people it let in lose that access at once.',
  },
} as const satisfies Record<string, { summary: string }>;

export type EventType = keyof typeof EVENT_TYPES;
