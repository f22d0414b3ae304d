-- jobkit 0006: results for the producer. `jobkit.wait()` learns that a job finished from a
-- notification on the channel '<schema>_done' (payload: the finished jobs' ids, comma-separated,
-- at most 200 per notification), sent by the statements that finish jobs: complete_jobs, fail_jobs
-- (for jobs out of attempts), cancel_job and sweep_stuck (for jobs out of attempts). One
-- notification per statement, not per job, and delivered at commit like any NOTIFY; a producer
-- behind a pooler without LISTEN polls instead. jobs.progress holds what a handler reported with
-- ctx.progress() (throttled by the worker), written by set_progress, fenced like a heartbeat.
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.

alter table {{ s }}.jobs add column progress jsonb;
alter table {{ s }}.jobs add constraint jobs_progress_object
    check (progress is null or pg_catalog.jsonb_typeof(progress) = 'object') not valid;  -- validated by deploy
