-- Which encryption key the sealed values (secrets, tokens, credentials) are sealed with, so that a start
-- with another key, or without the key file, refuses at once instead of failing requests later
-- (src/crypto/key-check.ts). One row. key_id names the key (an HMAC of a constant under it, never the
-- key); check_value is a known text sealed with it, proving a key is that key. rotating_to names the
-- key a rotation in progress (scripts/rotate-key.ts) re-encrypts to: both keys are needed until it ends.
create table key_check (
  singleton boolean primary key default true check (singleton),
  key_id text not null,
  check_value text not null,
  rotating_to text,
  updated_at timestamptz not null default now()
);
