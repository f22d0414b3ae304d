-- The public API: durable steps (ctx.step, issue 25)
-- sql/functions/45_steps.sql: a job's completed steps read back on a retry, and a step's record written fenced by its attempt.
-- Applied in file-name order (after 40_finish.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.

-- The completed steps of a job: what a retry (or, later, a replay after a wait) returns instead of
-- running them again. Failed steps are not returned: they run again.
create or replace function {{ s }}.load_steps(p_id uuid)
returns table (name text, occurrence int, result jsonb)
language sql stable set search_path = '' as $$
    select t.name, t.occurrence, t.result
    from {{ s }}.job_steps t
    where t.job_id = p_id and t.status = 'completed'
$$;

-- Record one step of a running attempt: completed (p_error null, p_result its JSON) or failed
-- (p_error its error, kept for debugging; it runs again on the next attempt). Fenced: false, and
-- nothing written, when the attempt no longer holds the job (its attempts counter moved on, or it
-- is no longer processing: swept after its lease expired, cancelled, deleted). The job row is
-- locked FOR SHARE until the caller's transaction ends, so a sweep or a cancel that moves the job
-- on waits for it or is seen by it: a transactional step (fn's work and this record in one
-- transaction) commits only while its attempt holds the job. A completed row is never overwritten.
create or replace function {{ s }}.save_step(
    p_id uuid, p_attempt int, p_name text, p_occurrence int, p_result jsonb, p_error text,
    p_tries int, p_started_at timestamptz
) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    if p_name is null or pg_catalog.char_length(p_name) not between 1 and 200
       or p_occurrence is null or p_occurrence < 1 then
        raise exception 'jobkit.save_step: a step needs a name of 1 to 200 characters and an occurrence >= 1'
            using errcode = '22023', hint = 'call ctx.step("name", fn) with a short, non-empty name';
    end if;
    perform 1 from {{ s }}.jobs j
    where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
    for share;
    if not found then
        return false;
    end if;
    insert into {{ s }}.job_steps as t
        (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
    values (p_id, p_name, p_occurrence, p_attempt,
            case when p_error is null then 'completed' else 'failed' end,
            case when p_error is null then p_result end, p_error,
            greatest(coalesce(p_tries, 1), 1), coalesce(p_started_at, now()))
    on conflict (job_id, name, occurrence) do update
        set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
            error = excluded.error, tries = excluded.tries, started_at = excluded.started_at,
            finished_at = now()
        where t.status <> 'completed';
    return true;
end
$$;
