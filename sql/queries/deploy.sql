-- Queries used by `jobkit deploy` (toolkit/deploy.py, toolkit/migrations.py).

-- name: server_info
select current_setting('server_version') as server_version,
       current_user as user_name,
       current_database() as database,
       has_database_privilege(current_database(), 'CREATE') as can_create,
       (select rolsuper from pg_roles where rolname = current_user) as is_superuser,
       current_setting('cron.database_name', true) as cron_database,
       current_setting('shared_preload_libraries') as preload,
       exists (select 1 from pg_available_extensions where name = 'pg_cron') as cron_available,
       (select extversion from pg_extension where extname = 'pg_cron') as cron_version,
       (select nspowner::regrole::text from pg_namespace where nspname = %(schema)s) as schema_owner

-- name: migration_table_exists
select to_regclass(%(table)s) is not null as exists

-- name: applied_migrations
select version, name, checksum, applied_at from {{ s }}.schema_migrations order by version

-- name: deploy_try_lock
select pg_try_advisory_lock(hashtextextended(%(key)s, 0)) as locked

-- name: deploy_unlock
select pg_advisory_unlock(hashtextextended(%(key)s, 0)) as unlocked

-- name: set_local_lock_timeout
select set_config('lock_timeout', %(timeout)s, true)

-- name: job_types_all
select type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap, backoff_jitter
from {{ s }}.job_types order by type

-- name: job_type_upsert
insert into {{ s }}.job_types
    (type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap, backoff_jitter)
values (%(type)s, %(max_attempts)s, %(lease)s, %(backoff_base)s, %(backoff_factor)s,
        %(backoff_cap)s, %(backoff_jitter)s)
on conflict (type) do update set
    max_attempts = excluded.max_attempts, lease = excluded.lease,
    backoff_base = excluded.backoff_base, backoff_factor = excluded.backoff_factor,
    backoff_cap = excluded.backoff_cap, backoff_jitter = excluded.backoff_jitter

-- name: job_type_delete
delete from {{ s }}.job_types where type = %(type)s and type <> '*'
