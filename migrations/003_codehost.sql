-- Code-host integrations (issue 5): what kind of credentials an integration holds, the non-secret parts
-- of a GitHub App identity (shown to users), and the webhook deliveries it received.

-- `token` (a personal or fine-grained access token) or `app` (a GitHub App installation). The secret
-- parts stay in credentials_encrypted; app_id and installation_id are identifiers, not secrets, and are
-- kept readable so responses can show which installation an integration uses.
alter table codehost_integrations
  add column kind text not null default 'token' check (kind in ('token', 'app')),
  add column app_id text,
  add column installation_id text,
  add constraint codehost_integrations_app_ids check ((kind = 'app') = (app_id is not null and installation_id is not null));
alter table codehost_integrations alter column kind drop default;

-- A name picks an integration in a list; two of the same name in a workspace would be ambiguous.
create unique index codehost_integrations_name on codehost_integrations (workspace_id, name);

-- codehost deployments by integration: the push webhook looks up the deployments of an integration,
-- and deleting an integration asks whether any deployment still uses it. repo_url is matched in code,
-- since equal repositories have several spellings (case, `.git`, a trailing slash).
create index deployments_codehost_integration on deployments ((source_config ->> 'integration_id'), (source_config ->> 'repo_url'))
  where source = 'codehost';

-- Every webhook delivery an integration received, with what came of it, so a user can see why a push
-- did or did not build. Rejected deliveries (bad signature, malformed payload, unknown repository) are
-- recorded too, but change nothing else.
create table codehost_webhook_deliveries (
  id uuid primary key,
  integration_id uuid not null references codehost_integrations (id) on delete cascade,
  workspace_id uuid not null references workspaces (id),
  -- X-GitHub-Delivery and X-GitHub-Event as sent; null when missing or unusable
  delivery_id text,
  event text,
  outcome text not null check (outcome in ('revision_created', 'ignored', 'duplicate', 'rejected')),
  -- machine-readable (`push`, `tag`, `branch_not_tracked`, `signature_mismatch`...) and a sentence
  reason text not null,
  message text not null,
  repository text,
  ref text,
  commit_sha text,
  -- revisions created by this delivery; no foreign key, a deleted deployment takes its revisions along
  revision_ids jsonb not null default '[]',
  received_at timestamptz not null default clock_timestamp()
);
-- A delivery id builds at most once (GitHub redelivers with the same id). Only deliveries that created
-- revisions count: a rejected one (say, forged without a signature) must not block the real delivery,
-- and one that built nothing may be redelivered after the user fixed the deployment.
create unique index codehost_webhook_deliveries_once on codehost_webhook_deliveries (integration_id, delivery_id)
  where outcome = 'revision_created';
create index codehost_webhook_deliveries_recent on codehost_webhook_deliveries (integration_id, received_at desc, id desc);
