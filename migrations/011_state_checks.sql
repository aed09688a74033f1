-- The values the code knows for the status, source and type columns of deployments and revisions, as
-- CHECK constraints, like the OAuth tables have had from the start (migrations/002_oauth.sql). The lists
-- are those of src/domain/states.ts (REVISION_STATUSES, DEPLOYMENT_STATUSES) and src/domain/sources.ts
-- (SOURCES, DEPLOYMENT_TYPES); src/store/schema.ts types the columns with the same unions, and
-- test/store/schema-drift.test.ts fails when the two disagree. The jsonb configs must be objects:
-- the code reads their fields. remote_reconciled is computed from listener_id and never null; saying
-- so lets its type say so too.
alter table deployments
  alter column remote_reconciled set not null,
  add constraint deployments_status check (status in ('AWAITING_DATABASE', 'READY', 'UNUSED', 'AWAITING_DELETE', 'UNKNOWN')),
  add constraint deployments_source check (source in ('codehost', 'external_container', 'internal_container', 'internal_source')),
  add constraint deployments_deployment_type check (deployment_type in ('dev_free', 'dev', 'prod')),
  add constraint deployments_source_config_object check (jsonb_typeof(source_config) = 'object'),
  add constraint deployments_secret_references_list check (secret_references is null or jsonb_typeof(secret_references) in ('array', 'null'));

alter table revisions
  add constraint revisions_status check (status in (
    'CREATING', 'QUEUED', 'AWAITING_BUILD', 'BUILDING', 'AWAITING_DEPLOY', 'DEPLOYING',
    'CREATE_FAILED', 'BUILD_FAILED', 'DEPLOY_FAILED', 'DEPLOYED', 'SKIPPED', 'INTERRUPTED', 'UNKNOWN')),
  add constraint revisions_source check (source in ('codehost', 'external_container', 'internal_container', 'internal_source')),
  add constraint revisions_source_revision_config_object check (jsonb_typeof(source_revision_config) = 'object'),
  add constraint revisions_snapshot_object check (jsonb_typeof(snapshot) = 'object');
