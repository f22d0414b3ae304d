-- The worker's URL and signing secret: Supabase Vault when installed, else jobkit's private secrets
-- table (jobkit._put_secret decides). The secret is generated inside the database
-- (rotate_worker_secret); statement logging is switched off around these statements when allowed.

-- name: secret_get
select {{ s }}.secret(%(name)s) as value

-- name: secret_put
select {{ s }}._put_secret(%(name)s, %(value)s)

-- name: secret_rotate
select {{ s }}.rotate_worker_secret(%(grace)s)

-- name: secret_replace
select {{ s }}.set_worker_secret(%(value)s, %(grace)s)

-- name: secrets_state
select pg_catalog.to_regclass('vault.decrypted_secrets') is not null
       and pg_catalog.to_regprocedure('vault.create_secret(text,text,text,uuid)') is not null as vault,
       (select previous_secret is not null from {{ s }}.worker_keys()) as previous_valid

-- name: quiet_logging
-- Superusers only (these settings are SUSET): keep this transaction's statements and their
-- parameters out of the server log even where log_statement = 'all'.
select pg_catalog.set_config('log_statement', 'none', true),
       pg_catalog.set_config('log_min_duration_statement', '-1', true),
       pg_catalog.set_config('log_parameter_max_length', '0', true)
where (select rolsuper from pg_catalog.pg_roles where rolname operator(pg_catalog.=) current_user)
