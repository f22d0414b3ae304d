-- The public API: views
-- sql/functions/90_views.sql: job_history, and the comment on jobs that points a reader to the state notes.
-- Applied in file-name order (after 85_secrets.sql, before 99_grants.sql); sql/functions/README.md says how deploy applies these files.

-- Every attempt of every job: the recorded ones, plus each completed job's final attempt.
create or replace view {{ s }}.job_history with (security_invoker = true) as
select a.job_id, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome, a.error, a.duration
from {{ s }}.job_attempts a
union all
select j.id, j.attempts, j.worker_id, j.started_at, j.completed_at, 'completed', null::text,
       j.completed_at - j.started_at
from {{ s }}.jobs j
where j.status = 'completed';
comment on view {{ s }}.job_history is
    'jobkit: every attempt; job_attempts rows plus the completing attempt of each completed job.';

comment on table {{ s }}.jobs is 'jobkit jobs: one row per job; see the state notes in sql/schema/tables.sql.';
