-- Security fixes: tokens are refreshed and revoked without a transaction held across the provider's
-- answer, PKCE is the default, agent credentials default to least privilege, and rejected webhook
-- deliveries are capped apart from the others.

-- Who is calling the provider about a token (a refresh or a revocation), and until when that claim
-- holds. Taken and given back with short conditional updates (src/store/oauth-tokens.ts), so that one
-- call per token runs at a time across replicas while no connection or row lock waits for the provider.
-- A claim left by a crashed replica lapses at claim_expires_at.
alter table oauth_tokens
  add column claim_id uuid,
  add column claim_expires_at timestamptz;

-- PKCE unless a provider is configured without it (RFC 9700 §2.1.1). A public client has no secret to
-- bind the code to it, so it must use PKCE: the ones registered before this rule get it. Providers that
-- do not know PKCE ignore the extra parameters (RFC 7636 §5).
alter table oauth_providers alter column uses_pkce set default true;
update oauth_providers set uses_pkce = true, updated_at = now() where token_endpoint_auth_method = 'none' and not uses_pkce;

comment on column agent_credentials.agent_ids is
  'The agents the credential may fetch tokens for. null: the deployment''s own agents (agent_id equal to the deployment''s name, or starting with it and a slash); see src/store/agent-credentials.ts.';

-- Pruning keeps the newest of each group (rejected deliveries, and the others) within its own cap.
create index codehost_webhook_deliveries_rejected on codehost_webhook_deliveries (integration_id, received_at desc, id desc)
  where outcome = 'rejected';
create index codehost_webhook_deliveries_accepted on codehost_webhook_deliveries (integration_id, received_at desc, id desc)
  where outcome <> 'rejected';
