-- The worker's URL and token: Supabase Vault when installed, else jobkit's private secrets table.
-- Values are always bound parameters; statement logging is switched off around them when allowed.

-- name: vault_available
select to_regclass('vault.decrypted_secrets') is not null
   and to_regprocedure('vault.create_secret(text,text,text,uuid)') is not null as available

-- name: vault_secret_id
select id from vault.decrypted_secrets where name = %(name)s

-- name: vault_create
select vault.create_secret(%(value)s, %(name)s, %(description)s) as id

-- name: vault_update
select vault.update_secret(%(id)s, %(value)s)

-- name: table_secret_set
insert into {{ s }}.secrets (name, value) values (%(name)s, %(value)s)
on conflict (name) do update set value = excluded.value, updated_at = now()

-- name: secret_get
select {{ s }}.secret(%(name)s) as value

-- name: quiet_logging
-- Superusers only (these settings are SUSET): keep this transaction's statements and their
-- parameters out of the server log even where log_statement = 'all'.
select set_config('log_statement', 'none', true),
       set_config('log_min_duration_statement', '-1', true),
       set_config('log_parameter_max_length', '0', true)
where (select rolsuper from pg_roles where rolname = current_user)
