-- pg_cron: where it runs, its jobs, and changes to them through its functions (never its tables).

-- name: cron_site
-- cron.database_name needs superuser or pg_read_all_settings; null when unreadable.
select pg_catalog.current_database() as database,
       case when (select rolsuper from pg_catalog.pg_roles where rolname operator(pg_catalog.=) current_user)
                 or pg_catalog.pg_has_role(current_user, 'pg_read_all_settings', 'member')
            then pg_catalog.current_setting('cron.database_name', true) end as cron_database,
       (select extversion from pg_catalog.pg_extension
        where extname operator(pg_catalog.=) 'pg_cron') as cron_version

-- name: cron_version
select (select extversion from pg_catalog.pg_extension
        where extname operator(pg_catalog.=) 'pg_cron') as version

-- name: cron_jobs
-- jobname is of type name in pg_cron 1.4: pg_catalog.left takes text.
select j.jobid, j.jobname, j.schedule, j.command, j.database, j.active,
       r.start_time as last_start, r.end_time as last_end, r.status as last_status,
       r.return_message as last_message
from cron.job j
left join lateral (
    select d.start_time, d.end_time, d.status, d.return_message from cron.job_run_details d
    where d.jobid operator(pg_catalog.=) j.jobid order by d.runid desc limit 1
) r on true
where pg_catalog.left(j.jobname, pg_catalog.length(%(prefix)s)) operator(pg_catalog.=) %(prefix)s
  and j.database operator(pg_catalog.=) any(%(databases)s)
order by j.jobname

-- name: cron_recent_runs
-- The last runs of jobkit's cron jobs (the newest first, up to p_limit each).
select j.jobid, r.runid, r.status, r.return_message, r.start_time, r.end_time
from cron.job j
cross join lateral (
    select d.runid, d.status, d.return_message, d.start_time, d.end_time from cron.job_run_details d
    where d.jobid operator(pg_catalog.=) j.jobid order by d.runid desc limit %(limit)s
) r
where j.jobid operator(pg_catalog.=) any(%(jobids)s)
order by j.jobid, r.runid desc

-- name: cron_schedule_in_database
select cron.schedule_in_database(%(name)s, %(schedule)s, %(command)s, %(database)s) as jobid

-- name: cron_alter_job
select cron.alter_job(%(jobid)s, schedule => %(schedule)s, command => %(command)s,
                      database => %(database)s, active => %(active)s)

-- name: cron_unschedule
select cron.unschedule(%(jobid)s::bigint) as ok

-- name: schedule_origins
select name, origin from {{ s }}.schedules

-- name: schedule_origin_set
insert into {{ s }}.schedules (name, origin) values (%(name)s, %(origin)s)
on conflict (name) do update set origin = excluded.origin, updated_at = pg_catalog.now()

-- name: schedule_origin_delete
delete from {{ s }}.schedules where name operator(pg_catalog.=) %(name)s

-- name: cron_next_minute
-- The next minute pg_cron will surely see coming (at least 10 s away), as a five-field cron
-- expression in its time zone (cron.timezone from pg_cron 1.5 on; before, GMT): "minute hour day
-- month *" fires then, and next a year later. "Run now" unschedules its one-off job long before.
select pg_catalog.to_char(t.at, 'FMMI FMHH24 FMDD FMMM') operator(pg_catalog.||) ' *' as expression,
       (t.at operator(pg_catalog.-) t.now) operator(pg_catalog.+) pg_catalog.now() as runs_at
from (select pg_catalog.date_trunc('minute', n.now) operator(pg_catalog.+)
             (interval '1 minute' operator(pg_catalog.*)
              case when extract(second from n.now) operator(pg_catalog.>=) 50 then 2 else 1 end) as at,
             n.now
      from (select pg_catalog.timezone(case when pg_catalog.current_setting('cron.timezone', true) operator(pg_catalog.<>) ''
                                                then pg_catalog.current_setting('cron.timezone', true) else 'GMT' end, pg_catalog.now()) as now) n) t

-- name: cron_local_now
-- pg_cron's wall clock: now in its time zone (cron.timezone from pg_cron 1.5 on; before, GMT).
select pg_catalog.timezone(case when pg_catalog.current_setting('cron.timezone', true) operator(pg_catalog.<>) ''
                                then pg_catalog.current_setting('cron.timezone', true) else 'GMT' end,
                           pg_catalog.now()) as local_now
