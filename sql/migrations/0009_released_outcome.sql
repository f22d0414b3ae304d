-- jobkit 0009: a job handed back by a stopping worker is recorded as 'released', no longer as
-- 'snoozed': the dashboard's rate-limit page counted those releases as rate-limit snoozes (of
-- types with no rate limit). Past releases are relabelled; the check is swapped live-safely: added
-- NOT VALID here, validated by deploy after the migrations in a transaction of its own (SHARE UPDATE
-- EXCLUSIVE: attempts go on being recorded while job_attempts is checked).
alter table {{ s }}.job_attempts drop constraint job_attempts_outcome_check;
alter table {{ s }}.job_attempts add constraint job_attempts_outcome_check
    check (outcome in ('completed', 'retry', 'failed', 'snoozed', 'released', 'lease_expired', 'cancelled'))
    not valid;
update {{ s }}.job_attempts set outcome = 'released'
where outcome = 'snoozed' and error = 'released by a stopping worker';

-- Hand claimed jobs back (a worker shutting down): pending again now, attempt not consumed.
create or replace function {{ s }}.release_jobs(p_ids uuid[], p_attempts int[]) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    with changed as (
        update {{ s }}.jobs j
        set status = 'pending', attempts = j.attempts - 1, scheduled_for = now(),
            lease_expires_at = null, updated_at = now()
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = p_attempts[array_position(p_ids, j.id)]
        returning j.id, j.attempts + 1 as attempt, j.worker_id, j.started_at
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempt, c.worker_id, c.started_at, 'released', 'released by a stopping worker'
        from changed c
    )
    select c.id from changed c;
    -- another worker takes them now, not at the next cron wake-up (never coalesced: wake())
    perform {{ s }}.wake(r.type) from (
        select distinct j.type from {{ s }}.jobs j where j.id = any (p_ids) and j.status = 'pending'
    ) r;
end
$$;
