-- jobkit 0014: the completion notification goes out only for jobs someone waits on (issue 23).
--
-- Every finishing statement (complete_jobs, fail_jobs, cancel_job, sweep_stuck) sent a NOTIFY on
-- <schema>_done, and a NOTIFY takes a database-wide lock at commit that serialises concurrent
-- committers, for every deployment, also those where nobody waits. Now jobkit.wait registers the
-- jobs it waits on here (wait_on) after it LISTENs, and _notify_done notifies only for ids that
-- have a row (which it deletes); with no row at all it costs one probe of an empty table. Expired
-- rows (a waiter that gave up) are deleted by prune. A new table only: no lock on jobs, nothing
-- that runs long (deploy sets lock_timeout before each migration).
-- squawk-ignore require-statement-timeout
create table {{ s }}.waiters (
    job_id     uuid primary key,
    expires_at timestamptz not null
);
-- squawk-ignore require-statement-timeout
alter table {{ s }}.waiters enable row level security;
