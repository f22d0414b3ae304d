-- Operator views: `jobkit status`, `jobkit jobs`, `jobkit doctor`.

-- name: status_types
select type,
       count(*) filter (where status = 'pending' and scheduled_for <= now()) as runnable,
       count(*) filter (where status = 'pending' and scheduled_for > now()) as scheduled,
       count(*) filter (where status = 'processing') as processing,
       count(*) filter (where status = 'completed' and completed_at > now() - interval '1 hour') as completed_1h,
       count(*) filter (where status = 'dead' and updated_at > now() - interval '1 hour') as dead_1h,
       count(*) filter (where status = 'completed' and completed_at > now() - interval '5 minutes') as completed_5m,
       extract(epoch from now() - min(scheduled_for) filter (
           where status = 'pending' and scheduled_for <= now()))::float8 as oldest_runnable_s
from {{ s }}.jobs group by type order by type

-- name: status_failures
select j.type, count(*) as failed_1h
from {{ s }}.job_attempts a join {{ s }}.jobs j on j.id = a.job_id
where a.finished_at > now() - interval '1 hour' and a.outcome in ('retry', 'failed', 'lease_expired')
group by j.type

-- name: status_wakeups
select type, coalesce(outcome, 'awaiting') as outcome, count(*) as n
from {{ s }}.wakeups where created_at > now() - interval '1 hour'
group by 1, 2 order by 1, 2

-- name: jobs_list
select id, type, status, priority, attempts, max_attempts, scheduled_for, created_at, completed_at,
       worker_id, left(split_part(coalesce(last_error, ''), E'\n', 1), 120) as error
from {{ s }}.jobs
where (%(type)s::text is null or type = %(type)s) and (%(status)s::text is null or status = %(status)s)
order by created_at desc limit %(limit)s

-- name: jobs_ids
select id from {{ s }}.jobs
where status = %(status)s and (%(type)s::text is null or type = %(type)s)
order by created_at

-- name: jobs_purge_batch
with victims as (
    select id from {{ s }}.jobs
    where status = %(status)s and coalesce(completed_at, updated_at) < now() - %(older_than)s
      and (%(type)s::text is null or type = %(type)s)
    order by coalesce(completed_at, updated_at) limit %(batch)s
    for update skip locked
), gone as (
    delete from {{ s }}.jobs j using victims v where j.id = v.id returning j.id
), history as (
    delete from {{ s }}.job_attempts a using gone g where a.job_id = g.id
)
select count(*) as deleted from gone

-- name: jobs_purge_count
select count(*) as n from {{ s }}.jobs
where status = %(status)s and coalesce(completed_at, updated_at) < now() - %(older_than)s
  and (%(type)s::text is null or type = %(type)s)

-- name: doctor_privileges
select current_user as user_name, current_database() as database,
       (select rolsuper from pg_roles where rolname = current_user) as is_superuser,
       has_database_privilege(current_database(), 'CREATE') as can_create,
       (select nspowner::regrole::text from pg_namespace where nspname = %(schema)s) as schema_owner

-- name: doctor_pg_net
select to_regprocedure('net.http_post(text,jsonb,jsonb,jsonb,integer)') is not null as installed,
       (select extversion from pg_extension where extname = 'pg_net') as version,
       exists (select 1 from pg_stat_activity
               where backend_type ilike '%%pg_net%%' or application_name ilike 'pg_net%%') as worker_running

-- name: doctor_vault
select to_regclass('vault.decrypted_secrets') is not null as installed,
       {{ s }}.secret('worker_url') is not null as url_set,
       {{ s }}.secret('worker_token') is not null as token_set,
       (select value #>> '{}' from {{ s }}.settings where key = 'transport') as transport

-- name: doctor_wake_failures
select coalesce(outcome, 'awaiting') as outcome, count(*) as n, max(error) as example
from {{ s }}.wakeups
where created_at > now() - interval '1 hour' and outcome in ('failed', 'timed_out', 'unanswered')
group by 1 order by 1

-- name: doctor_rls
select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = %(schema)s and c.relkind = 'r' and not c.relrowsecurity order by 1

-- name: doctor_api_grants
-- Every privilege anon or authenticated holds on jobkit's schema, tables, views or functions.
select r.rolname as role, 'schema ' || %(schema)s as object
from pg_roles r where r.rolname in ('anon', 'authenticated')
  and has_schema_privilege(r.oid, %(schema)s, 'USAGE')
union all
select r.rolname, 'table ' || c.oid::regclass::text  -- (GRANT and REVOKE call views tables too)
from pg_roles r cross join pg_class c join pg_namespace n on n.oid = c.relnamespace
where r.rolname in ('anon', 'authenticated') and n.nspname = %(schema)s and c.relkind in ('r', 'v')
  and (has_table_privilege(r.oid, c.oid, 'SELECT') or has_table_privilege(r.oid, c.oid, 'INSERT')
       or has_table_privilege(r.oid, c.oid, 'UPDATE') or has_table_privilege(r.oid, c.oid, 'DELETE'))
union all
select r.rolname, 'function ' || p.oid::regprocedure::text
from pg_roles r cross join pg_proc p join pg_namespace n on n.oid = p.pronamespace
where r.rolname in ('anon', 'authenticated') and n.nspname = %(schema)s
  and has_function_privilege(r.oid, p.oid, 'EXECUTE')
order by 1, 2

-- name: doctor_table_rows
select c.reltuples::bigint as estimated_rows, pg_total_relation_size(c.oid) as bytes
from pg_class c where c.oid = to_regclass(%(table)s)

-- name: ping_job
select {{ s }}.enqueue('jobkit.ping', jsonb_build_object('at', now()), 100, now(), 1, null) as id

-- name: job_status
select status, result, last_error from {{ s }}.jobs where id = %(id)s
