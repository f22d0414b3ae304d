-- Operator views: `jobkit status`, `jobkit jobs`, `jobkit doctor`.

-- name: status_types
select type,
       pg_catalog.count(*) filter (
           where status operator(pg_catalog.=) 'pending'
               and scheduled_for operator(pg_catalog.<=) pg_catalog.now()) as runnable,
       pg_catalog.count(*) filter (
           where status operator(pg_catalog.=) 'pending'
               and scheduled_for operator(pg_catalog.>) pg_catalog.now()) as scheduled,
       pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'processing') as processing,
       pg_catalog.count(*) filter (
           where status operator(pg_catalog.=) 'completed'
               and completed_at operator(pg_catalog.>) (pg_catalog.now()
                   operator(pg_catalog.-) interval '1 hour')) as completed_1h,
       pg_catalog.count(*) filter (
           where status operator(pg_catalog.=) 'dead'
               and updated_at operator(pg_catalog.>) (pg_catalog.now()
                   operator(pg_catalog.-) interval '1 hour')) as dead_1h,
       pg_catalog.count(*) filter (
           where status operator(pg_catalog.=) 'completed'
               and completed_at operator(pg_catalog.>) (pg_catalog.now()
                   operator(pg_catalog.-) interval '5 minutes')) as completed_5m,
       extract(epoch from pg_catalog.now() operator(pg_catalog.-) pg_catalog.min(scheduled_for) filter (
           where status operator(pg_catalog.=) 'pending'
               and scheduled_for operator(pg_catalog.<=) pg_catalog.now()))::pg_catalog.float8
           as oldest_runnable_s,
       pg_catalog.count(*) filter (
           where status operator(pg_catalog.=) 'cancelled'
               and completed_at operator(pg_catalog.>) (pg_catalog.now()
                   operator(pg_catalog.-) interval '1 hour')) as cancelled_1h,
       pg_catalog.count(distinct concurrency_key) filter (where status
           operator(pg_catalog.=) any ('{pending,processing}')) as keys
from {{ s }}.jobs group by type order by type

-- name: status_limits
-- Fair types' limits, and which types are paused (whole, or how many keys).
select coalesce(t.type, p.type) as type, coalesce(t.fair, false) as fair, t.max_running_per_key,
       t.max_running, coalesce(p.paused, false) as paused, coalesce(p.paused_keys, 0) as paused_keys
from (select x.type, x.fair, x.max_running_per_key, x.max_running from {{ s }}.job_types x where x.fair) t
full join (select y.type, pg_catalog.bool_or(y.key is null) as paused,
                  pg_catalog.count(y.key) as paused_keys
           from {{ s }}.pauses y group by y.type) p on p.type operator(pg_catalog.=) t.type
order by 1

-- name: status_keys
-- The busiest concurrency keys: running and runnable jobs per (type, key), most running first.
select type, concurrency_key as key,
       pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'processing') as running,
       pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'pending'
           and scheduled_for operator(pg_catalog.<=) pg_catalog.now()) as runnable
from {{ s }}.jobs
where concurrency_key is not null and status operator(pg_catalog.=) any ('{pending,processing}')
group by 1, 2
order by 3 desc, 4 desc, 1, 2
limit %(limit)s

-- name: status_failures
select j.type, pg_catalog.count(*) as failed_1h
from {{ s }}.job_attempts a join {{ s }}.jobs j on j.id operator(pg_catalog.=) a.job_id
where a.finished_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
  and a.outcome operator(pg_catalog.=) any ('{retry,failed,lease_expired}')
group by j.type

-- name: status_wakeups
select type, coalesce(outcome, 'awaiting') as outcome, pg_catalog.count(*) as n
from {{ s }}.wakeups where created_at operator(pg_catalog.>) (pg_catalog.now()
    operator(pg_catalog.-) interval '1 hour')
group by 1, 2 order by 1, 2

-- name: jobs_list
-- attempt_limit: the limit of the job's round (README "One rule for max_attempts"; the handler's
-- own once one claimed it), round_attempts: the attempts of that round.
select j.id, j.type, j.status, j.priority, j.attempts, j.max_attempts, j.scheduled_for, j.created_at,
       j.completed_at, j.worker_id, j.concurrency_key as key, j.round_start,
       j.attempts operator(pg_catalog.-) j.round_start as round_attempts,
       {{ s }}.attempt_limit(j.max_attempts, j.handler_max_attempts, coalesce(t.max_attempts, d.max_attempts))
           as attempt_limit,
       -- the error's last line: a traceback's first line says nothing, its last names the exception
       pg_catalog.left(pg_catalog.substring(pg_catalog.rtrim(coalesce(j.last_error, ''), E' \n'), E'[^\n]*$'),
                       120) as error
from {{ s }}.jobs j
left join {{ s }}.job_types t on t.type operator(pg_catalog.=) j.type
left join {{ s }}.job_types d on d.type operator(pg_catalog.=) '*'
where (%(type)s::pg_catalog.text is null or j.type operator(pg_catalog.=) %(type)s)
  and (%(status)s::pg_catalog.text is null or j.status operator(pg_catalog.=) %(status)s)
  and (%(key)s::pg_catalog.text is null or j.concurrency_key operator(pg_catalog.=) %(key)s)
order by j.created_at desc limit %(limit)s

-- name: job_attempt_limit
select {{ s }}.attempt_limit(j.max_attempts, j.handler_max_attempts, coalesce(t.max_attempts, d.max_attempts))
from {{ s }}.jobs j
left join {{ s }}.job_types t on t.type operator(pg_catalog.=) j.type
left join {{ s }}.job_types d on d.type operator(pg_catalog.=) '*'
where j.id operator(pg_catalog.=) %(id)s

-- name: jobs_purge_batch
with victims as (
    select id from {{ s }}.jobs
    where status operator(pg_catalog.=) %(status)s
      and coalesce(completed_at, updated_at)
          operator(pg_catalog.<) (pg_catalog.now() operator(pg_catalog.-) %(older_than)s)
      and (%(type)s::pg_catalog.text is null or type operator(pg_catalog.=) %(type)s)
    order by coalesce(completed_at, updated_at) limit %(batch)s
    for update skip locked
), gone as (
    delete from {{ s }}.jobs j using victims v where j.id operator(pg_catalog.=) v.id returning j.id
), history as (
    delete from {{ s }}.job_attempts a using gone g where a.job_id operator(pg_catalog.=) g.id
)
select pg_catalog.count(*) as deleted from gone

-- name: jobs_purge_count
select pg_catalog.count(*) as n from {{ s }}.jobs
where status operator(pg_catalog.=) %(status)s
  and coalesce(completed_at, updated_at)
      operator(pg_catalog.<) (pg_catalog.now() operator(pg_catalog.-) %(older_than)s)
  and (%(type)s::pg_catalog.text is null or type operator(pg_catalog.=) %(type)s)

-- name: doctor_privileges
select current_user as user_name, pg_catalog.current_database() as database,
       (select rolsuper from pg_catalog.pg_roles where rolname
           operator(pg_catalog.=) current_user) as is_superuser,
       pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE') as can_create,
       (select nspowner::pg_catalog.regrole::pg_catalog.text from pg_catalog.pg_namespace
        where nspname operator(pg_catalog.=) %(schema)s) as schema_owner

-- name: doctor_pg_net
select pg_catalog.to_regprocedure('net.http_post(text,jsonb,jsonb,jsonb,integer)') is not null as installed,
       (select extversion from pg_catalog.pg_extension
        where extname operator(pg_catalog.=) 'pg_net') as version,
       exists (select 1 from pg_catalog.pg_stat_activity
               where backend_type operator(pg_catalog.~~*) '%%pg_net%%'
                   or application_name operator(pg_catalog.~~*) 'pg_net%%') as worker_running

-- name: doctor_vault
select pg_catalog.to_regclass('vault.decrypted_secrets') is not null as installed,
       {{ s }}.secret('worker_url') is not null as url_set,
       {{ s }}.secret('worker_secret') is not null as secret_set,
       (select value operator(pg_catalog.#>>) '{}'::pg_catalog.text[] from {{ s }}.settings where key
           operator(pg_catalog.=) 'transport') as transport

-- name: doctor_wake_failures
select coalesce(outcome, 'awaiting') as outcome, pg_catalog.count(*) as n, pg_catalog.max(error) as example
from {{ s }}.wakeups
where created_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
    and outcome operator(pg_catalog.=) any ('{failed,timed_out,unanswered}')
group by 1 order by 1

-- name: doctor_rls
select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid
    operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s and c.relkind operator(pg_catalog.=) 'r'
    and not c.relrowsecurity order by 1

-- name: doctor_api_grants
-- Every privilege anon or authenticated holds on jobkit's schema, tables, views or functions.
select r.rolname as role, 'schema ' operator(pg_catalog.||) %(schema)s::pg_catalog.text as object
from pg_catalog.pg_roles r where r.rolname operator(pg_catalog.=) any ('{anon,authenticated}')
  and pg_catalog.has_schema_privilege(r.oid, %(schema)s, 'USAGE')
union all  -- (GRANT and REVOKE call views tables too)
select r.rolname, 'table ' operator(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text
from pg_catalog.pg_roles r cross join pg_catalog.pg_class c
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where r.rolname operator(pg_catalog.=) any ('{anon,authenticated}')
    and n.nspname operator(pg_catalog.=) %(schema)s and c.relkind operator(pg_catalog.=) any ('{r,v}')
  and (pg_catalog.has_table_privilege(r.oid, c.oid, 'SELECT')
       or pg_catalog.has_table_privilege(r.oid, c.oid, 'INSERT')
       or pg_catalog.has_table_privilege(r.oid, c.oid, 'UPDATE')
       or pg_catalog.has_table_privilege(r.oid, c.oid, 'DELETE'))
union all
select r.rolname, 'function ' operator(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text
from pg_catalog.pg_roles r cross join pg_catalog.pg_proc p
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) p.pronamespace
where r.rolname operator(pg_catalog.=) any ('{anon,authenticated}')
    and n.nspname operator(pg_catalog.=) %(schema)s
  and pg_catalog.has_function_privilege(r.oid, p.oid, 'EXECUTE')
order by 1, 2

-- name: doctor_table_rows
-- to_regclass returns regclass, for which pg_catalog has no = operator: compared as an oid.
select c.reltuples::bigint as estimated_rows,
       pg_catalog.pg_total_relation_size(c.oid::pg_catalog.regclass) as bytes
from pg_catalog.pg_class c where c.oid
    operator(pg_catalog.=) pg_catalog.to_regclass(%(table)s)::pg_catalog.oid

-- name: doctor_table_count
-- An exact count when the estimate is unknown (reltuples = -1 before the first ANALYZE); the table
-- name goes through to_regclass and its regclass output (a quoted identifier), never raw text.
select (pg_catalog.xpath('/row/n/text()', pg_catalog.query_to_xml(
           pg_catalog.format('select pg_catalog.count(*) as n from %%s', pg_catalog.to_regclass(%(table)s)),
           false, true, '')))[1]::pg_catalog.text::bigint as n

-- name: ping_job
select {{ s }}.enqueue('jobkit.ping', pg_catalog.jsonb_build_object('at', pg_catalog.now()), 100,
                       pg_catalog.now(), 1, null) as id

-- name: job_status
select status, result, last_error from {{ s }}.jobs where id operator(pg_catalog.=) %(id)s

-- name: ping_wakeup
-- The wake transport, and what became of the ping's last wake-up (pg_net's answers read first).
with reconciled as (select {{ s }}.reconcile_wakeups() as n)
select t.value operator(pg_catalog.#>>) '{}'::pg_catalog.text[] as transport, w.id is not null as sent,
    w.outcome,
       w.status_code, w.error
from reconciled, {{ s }}.settings t
left join lateral (select x.id, x.outcome, x.status_code, x.error from {{ s }}.wakeups x
                   where x.type
                       operator(pg_catalog.=) 'jobkit.ping' order by x.created_at desc limit 1) w on true
where t.key operator(pg_catalog.=) 'transport'

-- name: ping_job_delete
delete from {{ s }}.jobs where id operator(pg_catalog.=) %(id)s and type operator(pg_catalog.=) 'jobkit.ping'

-- name: sql_api_functions
-- The functions of jobkit's schema as the catalog has them (docs/SQL_API.md's signatures).
select p.proname as name, pg_catalog.pg_get_function_arguments(p.oid) as args,
       pg_catalog.pg_get_function_result(p.oid) as result
from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) p.pronamespace
where n.nspname operator(pg_catalog.=) %(schema)s
order by p.proname, 2

-- name: api_catalog
-- The [api] schema's functions with a digest of each body, settings and grants (and the schema's):
-- what deploy's API script would change.
select p.oid::pg_catalog.regprocedure::pg_catalog.text as signature,
       pg_catalog.md5(p.prosrc operator(pg_catalog.||) coalesce(pg_catalog.array_to_string(p.proconfig, ','),
           '')
                      operator(pg_catalog.||) coalesce(p.proacl::pg_catalog.text,
                          '') operator(pg_catalog.||) coalesce(n.nspacl::pg_catalog.text, '')) as body
from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) p.pronamespace
where n.nspname operator(pg_catalog.=) %(schema)s

-- name: user_api_catalog
-- The [user_api] schema as deploy's trial run compares it: functions (body, settings, grants),
-- tables (columns, grants, RLS), policies, the sync triggers on jobkit's jobs table, and whether
-- Realtime's publication carries the table. ACLs are compared sorted (a revoke and a re-grant
-- reorder them).
select p.oid::pg_catalog.regprocedure::pg_catalog.text as signature,
       pg_catalog.md5(p.prosrc operator(pg_catalog.||) coalesce(pg_catalog.array_to_string(p.proconfig, ','),
           '')
                      operator(pg_catalog.||) coalesce((select pg_catalog.string_agg(x::pg_catalog.text,
                          ',' order by x::pg_catalog.text) from pg_catalog.unnest(p.proacl) x),
                              '') operator(pg_catalog.||) coalesce((select pg_catalog.string_agg(x::pg_catalog.text, ',' order by x::pg_catalog.text) from pg_catalog.unnest(n.nspacl) x), '')
                      operator(pg_catalog.||) p.prosecdef::pg_catalog.text) as body
from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) p.pronamespace
where n.nspname operator(pg_catalog.=) %(schema)s
union all
select 'table ' operator(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text,
       pg_catalog.md5(coalesce((select pg_catalog.string_agg(x::pg_catalog.text,
           ',' order by x::pg_catalog.text) from pg_catalog.unnest(c.relacl) x),
               '') operator(pg_catalog.||) c.relrowsecurity::pg_catalog.text
                      operator(pg_catalog.||) c.relreplident::pg_catalog.text
                      operator(pg_catalog.||) (select pg_catalog.string_agg(a.attname::pg_catalog.text
                          operator(pg_catalog.||) ' '
                                                       operator(pg_catalog.||) pg_catalog.format_type(a.atttypid, a.atttypmod), ','
                                                       order by a.attnum)
                          from pg_catalog.pg_attribute a where a.attrelid operator(pg_catalog.=) c.oid
                              and a.attnum operator(pg_catalog.>) 0
                            and not a.attisdropped))
from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s and c.relkind operator(pg_catalog.=) 'r'
union all
select 'policy ' operator(pg_catalog.||) pol.polname::pg_catalog.text,
       pg_catalog.md5(pg_catalog.pg_get_expr(pol.polqual,
           pol.polrelid) operator(pg_catalog.||) pol.polcmd::pg_catalog.text
                      operator(pg_catalog.||) pol.polroles::pg_catalog.text)
from pg_catalog.pg_policy pol join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) pol.polrelid
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s
union all
select 'trigger ' operator(pg_catalog.||) t.tgname::pg_catalog.text,
    pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid))
from pg_catalog.pg_trigger t join pg_catalog.pg_proc p on p.oid operator(pg_catalog.=) t.tgfoid
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) p.pronamespace
where n.nspname operator(pg_catalog.=) %(schema)s
union all
select 'publication ' operator(pg_catalog.||) pt.pubname::pg_catalog.text, ''
from pg_catalog.pg_publication_tables pt where pt.schemaname operator(pg_catalog.=) %(schema)s

-- name: doctor_fairness
-- Fair types (with their limits), unfinished jobs of fair types without a key (fair claims never
-- see them), what is paused, and the cancellations of the last hour (running ones among them).
-- concat_ws skips nulls: "tenant 2/key 10 max", "mail key k1".
select (select pg_catalog.array_agg(
                   pg_catalog.concat_ws(' ', t.type, t.max_running_per_key operator(pg_catalog.||) '/key',
                                        t.max_running operator(pg_catalog.||) ' max') order by t.type)
        from {{ s }}.job_types t where t.fair) as fair,
       (select pg_catalog.count(*) from {{ s }}.jobs j
        join {{ s }}.job_types t on t.type operator(pg_catalog.=) j.type
        where t.fair and j.status operator(pg_catalog.=) any ('{pending,processing}')
          and j.concurrency_key is null) as keyless,
       (select pg_catalog.array_agg(pg_catalog.concat_ws(' key ', p.type, p.key) order by p.type, p.key)
        from {{ s }}.pauses p) as paused,
       (select pg_catalog.count(*) from {{ s }}.jobs j
        where j.status operator(pg_catalog.=) 'cancelled'
          and j.completed_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour'))
           as cancelled_1h,
       (select pg_catalog.count(*) from {{ s }}.job_attempts a
        where a.outcome operator(pg_catalog.=) 'cancelled'
          and a.finished_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour'))
           as cancelled_running_1h

-- name: pause_type
select {{ s }}.pause_type(%(type)s, %(key)s) as changed

-- name: resume_type
select {{ s }}.resume_type(%(type)s, %(key)s) as changed

-- name: pauses_all
select type, key, paused_at from {{ s }}.pauses order by type, key nulls first

-- name: type_known
-- Is this job type known beyond jobkit.toml (ops/types.py): synced to job_types by deploy, served by
-- a worker (known_types), paused, or the type of a job. Stops at the first that has it.
select exists (select 1 from {{ s }}.job_types t where t.type operator(pg_catalog.=) %(type)s::pg_catalog.text)
    or exists (select 1 from {{ s }}.known_types k where k.type operator(pg_catalog.=) %(type)s::pg_catalog.text)
    or exists (select 1 from {{ s }}.pauses p where p.type operator(pg_catalog.=) %(type)s::pg_catalog.text)
    or exists (select 1 from {{ s }}.jobs j where j.type operator(pg_catalog.=) %(type)s::pg_catalog.text) as known

-- name: known_types
-- Every job type the database knows (the "did you mean" of an unknown one: ops/types.py).
select t.type from {{ s }}.job_types t where t.type operator(pg_catalog.<>) '*'
union select k.type from {{ s }}.known_types k
union select p.type from {{ s }}.pauses p
union select j.type from {{ s }}.jobs j

-- name: workers_list
-- The workers table with each worker's state (0021): `jobkit status`, the dashboard's /workers, doctor.
-- Live ones first, then stale, then gone; the oldest first within each; at most %(limit)s.
select w.id, w.host, w.pid, w.version, w.transport, w.concurrency, w.types, w.running,
       extract(epoch from w.heartbeat)::pg_catalog.float8 as heartbeat_s, w.started_at, w.last_seen,
       extract(epoch from pg_catalog.now() operator(pg_catalog.-) w.last_seen)::pg_catalog.float8
           as seen_ago_s,
       w.gone_at, w.gone_reason, w.state
from {{ s }}.workers_now() w
order by pg_catalog.array_position('{alive,stale,gone}'::pg_catalog.text[], w.state), w.started_at, w.id
limit %(limit)s

-- name: workers_jobs
-- The jobs these workers hold now: leased rows only (jobs_lease_idx), never a scan of jobs.
select j.worker_id, j.id, j.type, j.attempts, j.started_at, j.lease_expires_at
from {{ s }}.jobs j
where j.lease_expires_at is not null and j.status operator(pg_catalog.=) 'processing'
  and j.worker_id operator(pg_catalog.=) any (%(ids)s::pg_catalog.text[])
order by j.worker_id, j.started_at, j.id
limit %(limit)s
