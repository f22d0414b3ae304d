-- Queries used by `jobkit deploy` (toolkit/deploy.py, toolkit/migrations.py).

-- name: server_info
-- cron.database_name is readable only by superusers and pg_read_all_settings members; for other
-- roles whether pg_cron is loaded stays unknown (null) rather than raising.
with me as (
    select r.rolsuper as is_superuser,
           r.rolsuper or pg_catalog.pg_has_role(current_user, 'pg_read_all_settings', 'member')
               as can_read_settings
    from pg_catalog.pg_roles r where r.rolname operator(pg_catalog.=) current_user
)
select pg_catalog.current_setting('server_version') as server_version,
       current_user as user_name,
       pg_catalog.current_database() as database,
       pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE') as can_create,
       me.is_superuser,
       me.can_read_settings,
       case when me.can_read_settings then pg_catalog.current_setting('cron.database_name', true) end
           as cron_database,
       exists (select 1 from pg_catalog.pg_available_extensions
               where name operator(pg_catalog.=) 'pg_cron') as cron_available,
       (select extversion from pg_catalog.pg_extension
        where extname operator(pg_catalog.=) 'pg_cron') as cron_version,
       (select nspowner::pg_catalog.regrole::pg_catalog.text from pg_catalog.pg_namespace
        where nspname operator(pg_catalog.=) %(schema)s) as schema_owner
from me

-- name: migration_table_exists
select pg_catalog.to_regclass(%(table)s) is not null as exists

-- name: applied_migrations
select version, name, checksum, applied_at from {{ s }}.schema_migrations order by version

-- name: deploy_try_lock
select pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended(%(key)s, 0)) as locked

-- name: deploy_lock
select pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended(%(key)s, 0))

-- name: deploy_unlock
select pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(%(key)s, 0)) as unlocked

-- name: pin_search_path
-- What every deploy script starts with (sql/bootstrap.sql): only pg_catalog, for this transaction.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)

-- name: set_local_lock_timeout
select pg_catalog.set_config('lock_timeout', %(timeout)s, true)

-- name: job_types_all
select type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap, backoff_jitter,
       wake_on_insert, rate_limit, fair, key_template, max_running_per_key, max_running
from {{ s }}.job_types order by type

-- name: job_type_upsert
insert into {{ s }}.job_types
    (type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap, backoff_jitter,
     wake_on_insert, rate_limit, fair, key_template, max_running_per_key, max_running)
values (%(type)s, %(max_attempts)s, %(lease)s, %(backoff_base)s, %(backoff_factor)s,
        %(backoff_cap)s, %(backoff_jitter)s, %(wake_on_insert)s, %(rate_limit)s, %(fair)s,
        %(key_template)s::pg_catalog.jsonb, %(max_running_per_key)s, %(max_running)s)
on conflict (type) do update set
    max_attempts = excluded.max_attempts, lease = excluded.lease,
    backoff_base = excluded.backoff_base, backoff_factor = excluded.backoff_factor,
    backoff_cap = excluded.backoff_cap, backoff_jitter = excluded.backoff_jitter,
    wake_on_insert = excluded.wake_on_insert, rate_limit = excluded.rate_limit,
    fair = excluded.fair, key_template = excluded.key_template,
    max_running_per_key = excluded.max_running_per_key, max_running = excluded.max_running

-- name: job_type_delete
delete from {{ s }}.job_types where type operator(pg_catalog.=) %(type)s and type operator(pg_catalog.<>) '*'

-- name: settings_all
select key, value from {{ s }}.settings order by key

-- name: setting_upsert
insert into {{ s }}.settings (key, value) values (%(key)s, %(value)s)
on conflict (key) do update set value = excluded.value, updated_at = pg_catalog.now()

-- name: pg_net_available
select pg_catalog.to_regprocedure('net.http_post(text,jsonb,jsonb,jsonb,integer)') is not null as available

-- name: ratelimits_all
select key, rate, burst, tokens, updated_at from {{ s }}.rate_limits order by key

-- name: ratelimit_upsert
-- A new bucket starts full; a changed one keeps its tokens, capped at the new burst.
insert into {{ s }}.rate_limits (key, rate, burst, tokens) values (%(key)s, %(rate)s, %(burst)s, %(burst)s)
on conflict (key) do update set rate = excluded.rate, burst = excluded.burst,
    tokens = least({{ s }}.rate_limits.tokens, excluded.burst)

-- name: ratelimit_delete
delete from {{ s }}.rate_limits where key operator(pg_catalog.=) %(key)s returning key

-- name: payload_index_state
-- The optional payload search index ([dashboard] payload_index): present, and valid (a CREATE
-- INDEX CONCURRENTLY that failed leaves an invalid one behind).
select i.indisvalid as valid
from pg_catalog.pg_index i
where i.indexrelid operator(pg_catalog.=)
      pg_catalog.to_regclass({{ (s ~ ".jobs_payload_idx") | literal }})::pg_catalog.oid

-- name: payload_index_create
create index concurrently if not exists jobs_payload_idx on {{ s }}.jobs using gin (payload pg_catalog.jsonb_path_ops)

-- name: payload_index_drop
drop index concurrently if exists {{ s }}.jobs_payload_idx

-- name: unvalidated_constraints
-- Constraints of jobkit's tables added NOT VALID and not validated yet: migrations add them so
-- (ACCESS EXCLUSIVE only for the catalog change) and deploy validates each after the migrations, in
-- a transaction of its own (SHARE UPDATE EXCLUSIVE: the table stays readable and writable while its
-- rows are checked). Also those an interrupted deploy left behind.
select c.conrelid::pg_catalog.regclass::pg_catalog.text as table_name, r.relname as "table", c.conname as name
from pg_catalog.pg_constraint c
join pg_catalog.pg_class r on r.oid operator(pg_catalog.=) c.conrelid
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) r.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s and not c.convalidated
order by r.relname, c.conname
