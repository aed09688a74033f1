-- Pull-request previews (docs/codehost.md, "Pull-request previews"): a pull request of a build_on_push
-- codehost deployment's repository builds a revision of its head commit, served at the endpoint
-- `pr-<number>` (deployment_endpoints, 027) and never at the deployment's own URL.
--
-- preview_pull_request marks such a revision: it never becomes the deployment's latest or active revision,
-- and the desired-state rule (src/domain/desired-state.ts) never takes it as the deployment's target.
alter table revisions add column preview_pull_request integer check (preview_pull_request > 0);

-- One row per open pull request that has (or was refused) a preview. The webhook writes the pull request's
-- facts; status_state/status_sha are what was last posted to the pull request as a commit status (written by
-- the status poster, src/service/preview-statuses.ts), so that each change of state is posted once.
create table pull_request_previews (
  deployment_id uuid not null references deployments (id) on delete cascade,
  pull_request integer not null check (pull_request > 0),
  -- `owner/name` of the base repository: where commit statuses go.
  repository text not null,
  head_sha text not null check (head_sha ~ '^([0-9a-f]{40}|[0-9a-f]{64})$'),
  head_repository text not null,
  from_fork boolean not null,
  -- The revision of head_sha; null while refused (refused_message says why).
  revision_id uuid references revisions (id) on delete set null,
  refused_message text,
  status_state text check (status_state in ('pending', 'success', 'failure', 'error')),
  status_sha text,
  status_attempts integer not null default 0,
  status_retry_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (deployment_id, pull_request)
);
create index pull_request_previews_revision on pull_request_previews (revision_id);

-- A deployment's preview settings; a deployment without a row has the defaults (the service's
-- SLIPWAY_PREVIEWS_PER_DEPLOYMENT, no secrets for forks).
create table deployment_preview_settings (
  deployment_id uuid primary key references deployments (id) on delete cascade,
  -- How many open pull requests have a preview at once; null: the service's default; 0: none.
  max_previews integer check (max_previews between 0 and 10),
  -- Whether a pull request from a fork gets the deployment's secrets, database and agent credential.
  fork_secrets boolean not null default false,
  updated_at timestamptz not null default now()
);

-- The data plane's report that an endpoint serves its revision wakes the preview status poster (and any
-- worker, which finds nothing to do), with the payload of 027's trigger.
create trigger deployment_endpoints_served_notify after update of served_revision_id on deployment_endpoints
  for each row when (new.served_revision_id is distinct from old.served_revision_id)
  execute function slipway_notify_endpoint_change();
