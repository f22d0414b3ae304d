-- The command text of jobkit's cron jobs, rendered per schedule. pg_cron stores it in cron.job and
-- copies it into every cron.job_run_details row, so it names functions and literal values only:
-- never a URL or a token (wake() reads those at run time).
-- pg_cron runs it under the job owner's default search_path: like the runtime queries (see
-- toolkit/queries.py) it names built-ins as pg_catalog.name and every operator as
-- OPERATOR(pg_catalog.op), so nothing planted on that path can run in its place.

-- name: wake_type
select {{ s }}.wake({{ type | literal }})

-- name: wake
select {{ s }}.wake_all()

-- name: sweep_stuck
select pg_catalog.count(*) from {{ s }}.sweep_stuck()

-- name: sweep_dead
select {{ s }}.sweep_dead()

-- name: prune
select {{ s }}.prune({{ retention | literal }}::interval), {{ s }}.prune_wakeups({{ retention | literal }}::interval)

-- name: prune_cron_history
delete from cron.job_run_details d using cron.job j where d.jobid operator(pg_catalog.=) j.jobid and j.jobname::pg_catalog.text operator(pg_catalog.~~) {{ prefix_like | literal }} and j.database operator(pg_catalog.=) {{ database | literal }} and d.end_time operator(pg_catalog.<) (pg_catalog.now() operator(pg_catalog.-) {{ retention | literal }}::interval)

-- name: unschedule_self
-- The first statement of a "run now" one-off job (toolkit/cron/runnow.py) when it runs in pg_cron's
-- own database: it removes itself, so it runs once (in the same transaction as the command).
select cron.unschedule({{ self_name | literal }}::pg_catalog.text)
