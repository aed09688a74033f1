-- Indexes that serve every filter of the deployment and revision lists together with their order
-- (created_at desc, id desc), so that a page reads about a page of index entries whatever the size of
-- the workspace (docs/performance.md). 001 already has (workspace_id, created_at, id) for the plain
-- list, (workspace_id, status, ...) for status, (workspace_id, name) unique for name, and
-- (deployment_id, created_at, id) for revisions.
--
-- Each index costs a little on every insert; lists are read far more often than deployments are made.

create index deployments_reconciled_page on deployments (workspace_id, remote_reconciled, created_at desc, id desc);
create index deployments_image_version_page on deployments (workspace_id, image_version, created_at desc, id desc);
create index deployments_type_page on deployments (workspace_id, deployment_type, created_at desc, id desc);
create index revisions_status_page on revisions (deployment_id, status, created_at desc, id desc);

-- A deployment's revisions all live in its workspace, but the planner takes deployment_id = $1 and
-- workspace_id = $2 as independent and expects a handful of rows where there are thousands; it then
-- sorts all of them instead of reading the newest page from revisions_page. The dependency statistics
-- tell it (they are gathered by ANALYZE; this one is quick: it samples at most 30,000 rows).
create statistics revisions_deployment_workspace (dependencies) on deployment_id, workspace_id from revisions;
analyze revisions;

-- name_contains is ILIKE '%text%', which no btree can serve: a trigram GIN index (pg_trgm) finds the
-- matching names without reading the table. pg_trgm ships with PostgreSQL (contrib; in the embedded
-- server and every managed service we know) and is a trusted extension, so a database owner may create
-- it. Where it is missing or may not be created, the migration still succeeds without the index and
-- name_contains walks the workspace's page index instead, filtering names (correct, but its cost then
-- grows with the workspace when few names match). Creating the extension and this index later by hand
-- brings it back; see docs/performance.md.
do $$
declare
  trgm_schema name;
begin
  if exists (select 1 from pg_available_extensions where name = 'pg_trgm') then
    begin
      create extension if not exists pg_trgm;
    exception when insufficient_privilege then
      raise warning 'pg_trgm may not be created by this role: name_contains will work without its index';
    end;
  else
    raise warning 'pg_trgm is not installed on this server: name_contains will work without its index';
  end if;
  select n.nspname into trgm_schema from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'pg_trgm';
  if trgm_schema is not null then
    -- The operator class named with its schema: the extension may live outside the search path.
    -- fastupdate off: GIN's pending list of not yet merged entries is read in full by every search,
    -- so after a burst of writes each name_contains got slower (measured: 4x after 1,600 creates);
    -- merging at insert time costs each write a little instead.
    execute format('create index deployments_name_trgm on deployments using gin (name %I.gin_trgm_ops) with (fastupdate = off)', trgm_schema);
  end if;
end
$$;
