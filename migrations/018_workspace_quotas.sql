-- A workspace's quota, set by an organization admin within the operator's maxima (issue 33): the total
-- memory (MiB), CPU (cores) and instances of its deployments on the service's own data plane, and how
-- many deployments it may have there. Null: no quota beyond the operator's maxima.
alter table workspaces
  add column quota_memory_mb integer check (quota_memory_mb >= 0),
  add column quota_cpu double precision check (quota_cpu >= 0),
  add column quota_instances integer check (quota_instances >= 0),
  add column quota_deployments integer check (quota_deployments >= 0);
