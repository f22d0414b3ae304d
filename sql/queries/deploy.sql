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

-- name: migration_checksum_update
update {{ s }}.schema_migrations set checksum = %(checksum)s where version operator(pg_catalog.=) %(version)s

-- name: deploy_try_lock
select pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended(%(key)s, 0)) as locked

-- name: deploy_unlock
select pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(%(key)s, 0)) as unlocked

-- name: pin_search_path
-- What every deploy script starts with (sql/bootstrap.sql): only pg_catalog, for this transaction.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)

-- name: set_local_lock_timeout
select pg_catalog.set_config('lock_timeout', %(timeout)s, true)

-- name: set_local_check_function_bodies
select pg_catalog.set_config('check_function_bodies', %(value)s, true)

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

-- name: event_config_all
-- [events."<name>"] as deploy last wrote them (issue 25): subscriber types and retention.
select name, types, retention from {{ s }}.event_config order by name

-- name: event_config_upsert
insert into {{ s }}.event_config (name, types, retention)
values (%(name)s, %(types)s::pg_catalog.text[], %(retention)s::interval)
on conflict (name) do update set types = excluded.types, retention = excluded.retention

-- name: event_config_delete
delete from {{ s }}.event_config where name operator(pg_catalog.=) %(name)s

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

-- name: created_index_state
-- The optional keyset index of the dashboard's jobs page ([dashboard] created_index, issue 23):
-- present, and valid. Not named jobs_created_idx: migration 0017 drops that one (0003's, built for
-- everyone), and deploy runs the head migration's outside-transaction steps again on every deploy.
select i.indisvalid as valid
from pg_catalog.pg_index i
where i.indexrelid operator(pg_catalog.=)
      pg_catalog.to_regclass({{ (s ~ ".jobs_created_page_idx") | literal }})::pg_catalog.oid

-- name: created_index_create
create index concurrently if not exists jobs_created_page_idx on {{ s }}.jobs (created_at, id)

-- name: created_index_drop
drop index concurrently if exists {{ s }}.jobs_created_page_idx

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

-- name: managed_fingerprint
-- What sql/functions/ manages in jobkit's schema, each object with the hash of its definition (as
-- PostgreSQL prints it): `deploy` reports the difference before and after, `deploy --check` fails
-- on one. Functions of extensions are not jobkit's, nor those of declared row triggers (rowtrigger_*,
-- compared by toolkit/schema/triggers.py).
select 'function ' operator(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text as object,
       pg_catalog.md5(pg_catalog.pg_get_functiondef(p.oid)) as hash
from pg_catalog.pg_proc p
where p.pronamespace operator(pg_catalog.=) %(schema)s::pg_catalog.regnamespace
  and not (p.proname::pg_catalog.text operator(pg_catalog.~~) 'rowtrigger\_%%')
  and not exists (select 1 from pg_catalog.pg_depend d
                  where d.classid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                    and d.objid operator(pg_catalog.=) p.oid and d.deptype operator(pg_catalog.=) 'e')
union all
select 'view ' operator(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text,
       pg_catalog.md5(pg_catalog.pg_get_viewdef(c.oid))
from pg_catalog.pg_class c
where c.relnamespace operator(pg_catalog.=) %(schema)s::pg_catalog.regnamespace
  and c.relkind operator(pg_catalog.=) 'v'
union all
select 'trigger ' operator(pg_catalog.||) t.tgname::pg_catalog.text operator(pg_catalog.||) ' on '
           operator(pg_catalog.||) t.tgrelid::pg_catalog.regclass::pg_catalog.text,
       pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid) operator(pg_catalog.||)
                      t.tgenabled::pg_catalog.text)
from pg_catalog.pg_trigger t
join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) t.tgrelid
join pg_catalog.pg_proc p on p.oid operator(pg_catalog.=) t.tgfoid
where c.relnamespace operator(pg_catalog.=) %(schema)s::pg_catalog.regnamespace
  and p.pronamespace operator(pg_catalog.=) %(schema)s::pg_catalog.regnamespace
  and not t.tgisinternal
order by 1

-- name: deploy_set
-- An input of the DO blocks below, for this transaction only (DO takes no parameters).
select pg_catalog.set_config('jobkit.deploy_' operator(pg_catalog.||) %(key)s, %(value)s, true)

-- name: functions_before
-- jobkit's functions as they were before this transaction applied sql/functions/: a function whose
-- row is still the same (oid, xmin) afterwards was not written by any file.
-- The functions of declared row triggers (rowtrigger_*, toolkit/schema/triggers.py) are not the files':
-- they are never dropped as stale here.
create temporary table pg_temp.jobkit_functions_before on commit drop as
select p.oid as fn_oid, p.xmin::pg_catalog.text as fn_xmin from pg_catalog.pg_proc p
where p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
  and not (p.proname::pg_catalog.text operator(pg_catalog.~~) 'rowtrigger\_%')

-- name: function_grants_keep
-- The EXECUTE privileges on jobkit's functions that roles other than the owner hold, by function
-- name, kept for this transaction: a function dropped and created anew (a changed signature) gets
-- them back (function_grants_restore).
create temporary table pg_temp.jobkit_function_grants on commit drop as
select distinct p.proname::pg_catalog.text as name, r.rolname::pg_catalog.text as grantee,
       a.is_grantable as grantable
from pg_catalog.pg_proc p
cross join lateral pg_catalog.aclexplode(p.proacl) a
join pg_catalog.pg_roles r on r.oid operator(pg_catalog.=) a.grantee
where p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
  and a.privilege_type operator(pg_catalog.=) 'EXECUTE' and a.grantee operator(pg_catalog.<>) p.proowner

-- name: function_grants_restore
do $restore$
declare
    r record;
begin
    for r in select pg_catalog.format('grant execute on function %s to %I%s', p.oid::pg_catalog.regprocedure,
                                      g.grantee, case when g.grantable then ' with grant option' else '' end) as stmt
             from pg_temp.jobkit_function_grants g
             join pg_catalog.pg_proc p on p.proname operator(pg_catalog.=) g.name::pg_catalog.name
             where p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace loop
        execute r.stmt;
    end loop;
end
$restore$

-- name: drop_function_overloads
-- A create or replace that PostgreSQL refused (a changed return type or parameter name): drop the
-- functions of that name (jobkit.deploy_function) that no file has written in this transaction yet.
do $drop$
declare
    r record;
begin
    for r in select p.oid::pg_catalog.regprocedure as identity from pg_catalog.pg_proc p
             where p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
               and p.proname operator(pg_catalog.=) pg_catalog.current_setting('jobkit.deploy_function')::pg_catalog.name
               and exists (select 1 from pg_temp.jobkit_functions_before b
                           where b.fn_oid operator(pg_catalog.=) p.oid
                             and b.fn_xmin operator(pg_catalog.=) p.xmin::pg_catalog.text) loop
        execute pg_catalog.format('drop function %s', r.identity);
    end loop;
end
$drop$

-- name: drop_stale
-- After every file of sql/functions/ ran: drop jobkit's triggers and views that no file defines
-- (jobkit.deploy_triggers, jobkit.deploy_views: comma-separated names) and the functions no file
-- wrote in this transaction; each one dropped is reported as a NOTICE 'jobkit: dropped ...'.
-- Triggers first (they depend on their functions), functions last. Functions of extensions stay.
do $stale$
declare
    r record;
begin
    for r in select t.tgname, t.tgrelid::pg_catalog.regclass as tbl
             from pg_catalog.pg_trigger t
             join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) t.tgrelid
             join pg_catalog.pg_proc p on p.oid operator(pg_catalog.=) t.tgfoid
             where c.relnamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
               and p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
               and not t.tgisinternal
               and not (t.tgname::pg_catalog.text operator(pg_catalog.=) any (pg_catalog.string_to_array(
                            pg_catalog.current_setting('jobkit.deploy_triggers'), ','))) loop
        execute pg_catalog.format('drop trigger %I on %s', r.tgname, r.tbl);
        raise notice 'jobkit: dropped trigger % on %', r.tgname, r.tbl;
    end loop;
    for r in select c.oid::pg_catalog.regclass as v from pg_catalog.pg_class c
             where c.relnamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
               and c.relkind operator(pg_catalog.=) 'v'
               and not (c.relname::pg_catalog.text operator(pg_catalog.=) any (pg_catalog.string_to_array(
                            pg_catalog.current_setting('jobkit.deploy_views'), ','))) loop
        execute pg_catalog.format('drop view %s', r.v);
        raise notice 'jobkit: dropped view %', r.v;
    end loop;
    for r in select p.oid::pg_catalog.regprocedure as f from pg_catalog.pg_proc p
             where p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
               and exists (select 1 from pg_temp.jobkit_functions_before b
                           where b.fn_oid operator(pg_catalog.=) p.oid
                             and b.fn_xmin operator(pg_catalog.=) p.xmin::pg_catalog.text)
               and not exists (select 1 from pg_catalog.pg_depend d
                               where d.classid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                                 and d.objid operator(pg_catalog.=) p.oid
                                 and d.deptype operator(pg_catalog.=) 'e') loop
        execute pg_catalog.format('drop function %s', r.f);
        raise notice 'jobkit: dropped function %', r.f;
    end loop;
end
$stale$

-- name: trigger_checksum
-- The sha256 of the statement that created a managed trigger, kept in its comment ('jobkit sha256:
-- ...'): deploy re-creates a trigger only when its statement changed (or the trigger was dropped),
-- since CREATE TRIGGER locks the table against writes until the transaction ends.
select pg_catalog.obj_description(t.oid, 'pg_trigger') as comment
from pg_catalog.pg_trigger t
where t.tgrelid operator(pg_catalog.=) pg_catalog.to_regclass(%(table)s)
  and t.tgname operator(pg_catalog.=) %(name)s::pg_catalog.name
  and t.tgenabled operator(pg_catalog.=) 'O'

-- name: set_session_lock_timeout
-- Outside any transaction (a migration's outside-transaction steps): for the session, until reset;
-- the search_path pinned as bootstrap.sql pins it for a migration's transaction.
select pg_catalog.set_config('lock_timeout', %(timeout)s, false),
       pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)

-- name: reset_lock_timeout
reset lock_timeout; reset search_path

-- name: index_invalid
-- A migration's outside-transaction index of this name in jobkit's schema, left INVALID by a
-- CREATE INDEX CONCURRENTLY that failed or was killed (dropped and built again by deploy).
select exists (
    select 1
    from pg_catalog.pg_index i
    join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) i.indexrelid
    join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
    where n.nspname operator(pg_catalog.=) %(schema)s and c.relname operator(pg_catalog.=) %(name)s
      and not i.indisvalid
) as invalid

-- name: index_valid
-- Whether a migration's outside-transaction index of this name in jobkit's schema is built and
-- valid (null: not built; false: left INVALID by a killed CREATE INDEX CONCURRENTLY), for --check.
select i.indisvalid as valid
from pg_catalog.pg_index i
join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) i.indexrelid
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s and c.relname operator(pg_catalog.=) %(name)s
