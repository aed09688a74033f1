-- Idempotency keys (docs/api.md, "Idempotent retries"): the first answer to a POST or PATCH sent with
-- an Idempotency-Key header, so that a retry with the same key gets that answer again instead of doing
-- the work twice. One row per key and scope; the primary key makes claiming a key race-free across
-- service replicas (INSERT ... ON CONFLICT, src/store/idempotency-keys.ts).
--
-- scope: whose key it is, 'workspace:<id>' (the workspace the request acted in) or 'organization:<id>'
--   (an organization route called without a workspace). Keys of different scopes never meet.
-- fingerprint: SHA-256 of the method, path and body; the same key with another request is refused.
-- state: 'running' while the first request runs (claim names that attempt, locked_until bounds how long
--   a crashed attempt holds the key), then 'done' with the answer kept.
-- response_body: null for a 2xx whose answer held a credential shown once (Cache-Control: no-store):
--   it is never stored; a retry is told the request was done instead.
-- Rows older than 24 hours are ignored and pruned (src/pipeline/retention.ts).
create table idempotency_keys (
  scope text not null,
  idempotency_key text not null,
  fingerprint bytea not null,
  state text not null check (state in ('running', 'done')),
  claim uuid not null,
  locked_until timestamptz not null,
  response_status integer,
  response_headers jsonb,
  response_body text,
  created_at timestamptz not null default now(),
  primary key (scope, idempotency_key)
);
create index idempotency_keys_created_at on idempotency_keys (created_at);
