-- jobkit 0002: a job's scheduled_for is a finite time. enqueue took 'infinity' and '-infinity' as
-- run_at, and then `jobkit status` (age arithmetic) and `jobkit jobs show` (Python has no infinite
-- datetime) broke on them. Rows that already have one are repaired first: '-infinity' means "due
-- long ago" and becomes created_at; an unfinished job due at 'infinity' could never run and is
-- cancelled with a note; a finished one keeps its created_at.

update {{ s }}.jobs set scheduled_for = created_at, updated_at = pg_catalog.now()
where scheduled_for = '-infinity'::timestamptz
   or (scheduled_for = 'infinity'::timestamptz and status not in ('pending', 'processing'));

update {{ s }}.jobs
set status = 'cancelled', scheduled_for = created_at, completed_at = pg_catalog.now(),
    lease_expires_at = null, updated_at = pg_catalog.now(),
    last_error = 'cancelled by jobkit migration 0002: run_at was infinity, so it could never run'
where scheduled_for = 'infinity'::timestamptz;

alter table {{ s }}.jobs add constraint jobs_scheduled_for_finite
    check (pg_catalog.isfinite(scheduled_for)) not valid;  -- validated by deploy after the migrations
