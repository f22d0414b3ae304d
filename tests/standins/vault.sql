-- =====================================================================================================
-- TEST STAND-IN for supabase_vault 0.3.x (SQL API as of 0.3.1). This is NOT the real extension and it
-- does NOT encrypt anything.
-- =====================================================================================================
-- Vault only exists on Supabase images, so the test suite loads this plain-SQL copy of its public
-- surface: the vault.secrets table, vault.create_secret, vault.update_secret and the
-- vault.decrypted_secrets view, with the same names, argument names, defaults, column list, unique
-- name index and privileges as supabase/vault's sql/supabase_vault--0.3.0.sql plus Supabase's
-- after-create grants. Instead of pgsodium's deterministic AEAD, `secret` holds the secret
-- base64-encoded (so the raw column never equals the plain text) and decrypted_secret decodes it.
--
-- As in 0.3.x, the nonce default vault._crypto_aead_det_noncegen() makes a direct
-- INSERT INTO vault.secrets fail with "permission denied for function _crypto_aead_det_noncegen"
-- (on Supabase that is a missing grant; here the function raises the same error, even for
-- superusers, unless called from create_secret). Use the functions.
--
-- Loading this file DROPS any existing `vault` schema. It refuses to run where the real
-- supabase_vault extension is installed.
-- =====================================================================================================

do $$
begin
    if exists (select from pg_catalog.pg_extension where extname = 'supabase_vault') then
        raise exception 'the real supabase_vault extension is installed here: refusing to load the test stand-in';
    end if;
end
$$;

drop schema if exists vault cascade;
create schema vault;
comment on schema vault is 'TEST STAND-IN for supabase_vault 0.3.x (tests/standins/vault.sql): secrets are only base64-encoded';

-- Stand-in for pgsodium's crypto_aead_det_noncegen (16 random bytes). Raises like Vault 0.3 does for
-- a direct INSERT, unless create_secret (which sets vault.stand_in_writer for its own insert) calls it.
create function vault._crypto_aead_det_noncegen()
returns bytea
language plpgsql
volatile
set search_path = ''
as $$
begin
    if coalesce(current_setting('vault.stand_in_writer', true), '') <> 'on' then
        raise exception using
            errcode = 'insufficient_privilege',
            message = 'permission denied for function _crypto_aead_det_noncegen';
    end if;
    return uuid_send(gen_random_uuid());
end
$$;

-- "Encryption" of the stand-in: base64 of the UTF-8 bytes (no key, no nonce, no integrity).
create function vault._crypto_aead_det_encrypt(message bytea, additional bytea, key_id bigint,
                                               context bytea = 'pgsodium', nonce bytea = null)
returns bytea language sql immutable as $$ select message $$;

create function vault._crypto_aead_det_decrypt(message bytea, additional bytea, key_id bigint,
                                               context bytea = 'pgsodium', nonce bytea = null)
returns bytea language sql immutable as $$ select message $$;

create table vault.secrets (
  id          uuid primary key default gen_random_uuid(),
  name        text,
  description text not null default '',
  secret      text not null,
  key_id      uuid,
  nonce       bytea default vault._crypto_aead_det_noncegen(),
  created_at  timestamptz not null default current_timestamp,
  updated_at  timestamptz not null default current_timestamp
);

comment on table vault.secrets is 'Table with encrypted `secret` column for storing sensitive information on disk.';

create unique index on vault.secrets using btree (name) where name is not null;

create view vault.decrypted_secrets as
select s.id,
  s.name,
  s.description,
  s.secret,
  convert_from(
    vault._crypto_aead_det_decrypt(
      message := decode(s.secret, 'base64'::text),
      additional := convert_to(s.id::text, 'utf8'),
      key_id := 0,
      context := 'pgsodium'::bytea,
      nonce := s.nonce
    ),
    'utf8'::name
  ) as decrypted_secret,
  s.key_id,
  s.nonce,
  s.created_at,
  s.updated_at
from vault.secrets s;

create function vault.create_secret(
  new_secret text,
  new_name text = null,
  new_description text = '',
  -- unused
  new_key_id uuid = null
)
returns uuid
security definer
language plpgsql
set search_path = ''
as $$
declare
  rec record;
begin
  perform pg_catalog.set_config('vault.stand_in_writer', 'on', true);
  insert into vault.secrets (secret, name, description)
  values (
    encode(vault._crypto_aead_det_encrypt(
      message := convert_to(new_secret, 'utf8'),
      additional := ''::bytea,
      key_id := 0
    ), 'base64'),
    new_name,
    new_description
  )
  returning * into rec;
  perform pg_catalog.set_config('vault.stand_in_writer', 'off', true);
  return rec.id;
end
$$;

create function vault.update_secret(
  secret_id uuid,
  new_secret text = null,
  new_name text = null,
  new_description text = null,
  -- unused
  new_key_id uuid = null
)
returns void
security definer
language plpgsql
set search_path = ''
as $$
begin
  update vault.secrets s
  set
    secret = case when new_secret is null then s.secret
                  else encode(vault._crypto_aead_det_encrypt(
                    message := convert_to(new_secret, 'utf8'),
                    additional := convert_to(s.id::text, 'utf8'),
                    key_id := 0,
                    context := 'pgsodium'::bytea,
                    nonce := s.nonce
                  ), 'base64') end,
    name = coalesce(new_name, s.name),
    description = coalesce(new_description, s.description),
    updated_at = now()
  where s.id = secret_id;
end
$$;

-- Privileges as on Supabase: nothing for PUBLIC (so anon/authenticated, the API roles, cannot use
-- vault at all); Supabase's after-create script grants postgres and service_role the schema, SELECT
-- and DELETE on the table and the view, and EXECUTE on the two functions.
revoke all on schema vault from public;
revoke all on all tables in schema vault from public;
revoke all on function
  vault._crypto_aead_det_encrypt,
  vault._crypto_aead_det_decrypt,
  vault._crypto_aead_det_noncegen,
  vault.create_secret,
  vault.update_secret
from public;

do $$
declare
    r text;
begin
    foreach r in array array['postgres', 'service_role'] loop
        continue when not exists (select from pg_catalog.pg_roles where rolname = r);
        execute format('grant usage on schema vault to %I', r);
        execute format('grant select, delete on vault.secrets, vault.decrypted_secrets to %I', r);
        execute format('grant execute on function vault.create_secret, vault.update_secret,'
                       ' vault._crypto_aead_det_decrypt to %I', r);
    end loop;
end
$$;
