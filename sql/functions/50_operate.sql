-- The public API: operators
-- sql/functions/50_operate.sql: retry, cancel, delete, pause and resume.
-- Applied in file-name order (after 40_finish.sql, before 60_sweeps.sql); sql/functions/README.md says how deploy applies these files.

-- Run a failed, dead or cancelled job again now with a fresh round of attempts, and wake the worker.
create or replace function {{ s }}.retry_job(p_id uuid) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_type text;
begin
    update {{ s }}.jobs j
    set status = 'pending', scheduled_for = now(), completed_at = null, lease_expires_at = null,
        round_start = j.attempts, updated_at = now()
    where j.id = p_id and j.status in ('failed', 'dead', 'cancelled')
    returning j.type into v_type;
    if v_type is null then
        return false;
    end if;
    perform {{ s }}._wake_for(v_type, 1, null);
    return true;
end
$$;

-- Cancel a pending, waiting, blocked or processing job. A running attempt may finish, but its result
-- is refused. A waiting job's wait is dropped. Waiters are notified. A job of a graph cancels its
-- blocked descendants (through 'fail' and 'cancel' edges; a 'run' child counts it as ended:
-- _settle_children).
create or replace function {{ s }}.cancel_job(p_id uuid) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_flow uuid;
begin
    with target as (
        select j.id, j.status as was from {{ s }}.jobs j
        where j.id = p_id and j.status in ('pending', 'processing', 'waiting', 'blocked')
        for update
    ), changed as (
        update {{ s }}.jobs j
        set status = 'cancelled', completed_at = now(), lease_expires_at = null, updated_at = now()
        from target t
        where j.id = t.id
        returning j.id, j.attempts, j.worker_id, j.started_at, t.was, j.flow_id
    ), history as (
        -- the running attempt ends here; a pending job's last attempt was recorded when it ended
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, c.attempts, c.worker_id, c.started_at, 'cancelled' from changed c
        where c.was = 'processing' and c.worker_id is not null and c.attempts > 0
    )
    select c.id, c.flow_id into v_id, v_flow from changed c;
    if v_id is null then
        return false;
    end if;
    delete from {{ s }}.job_waits w where w.job_id = v_id;
    perform {{ s }}._notify_done(array[v_id]);
    if v_flow is not null then
        perform {{ s }}._settle_children(array[v_id]);
    end if;
    return true;
end
$$;

-- Retry many jobs (retry_job for each): returns how many went back to pending. A job whose
-- idempotency key a newer unfinished job now holds stays where it is, and the rest still retry.
create or replace function {{ s }}.retry_jobs(p_ids uuid[]) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_retried int := 0;
begin
    foreach v_id in array coalesce(p_ids, '{}') loop
        begin
            if {{ s }}.retry_job(v_id) then
                v_retried := v_retried + 1;
            end if;
        exception when unique_violation then
            null;  -- the key belongs to a newer unfinished job: this one stays as it is
        end;
    end loop;
    return v_retried;
end
$$;

-- Cancel many jobs (cancel_job for each): returns how many were cancelled.
create or replace function {{ s }}.cancel_jobs(p_ids uuid[]) returns int
language sql volatile set search_path = '' as $$
    select count(*) filter (where {{ s }}.cancel_job(i))::int from unnest(p_ids) as i
$$;

-- Delete many jobs with their attempt history and steps: returns how many. A processing job is left alone
-- (cancel it first: its worker still holds it).
create or replace function {{ s }}.delete_jobs(p_ids uuid[]) returns int
language sql volatile set search_path = '' as $$
    with gone as (
        delete from {{ s }}.jobs j where j.id = any(p_ids) and j.status <> 'processing' returning j.id
    ), history as (
        delete from {{ s }}.job_attempts a using gone g where a.job_id = g.id
    ), steps as (
        delete from {{ s }}.job_steps t using gone g where t.job_id = g.id
    ), waits as (
        delete from {{ s }}.job_waits w using gone g where w.job_id = g.id
    ), edges as (  -- its own edges in; a blocked child of a deleted parent: _sweep_blocked settles it
        delete from {{ s }}.job_edges e using gone g where e.child_id = g.id
    )
    select count(*)::int from gone
$$;

-- Pause a type (p_key null) or one key of it: its jobs are not claimed and (for a type) not woken
-- for until resume_type. True when it was not paused yet.
create or replace function {{ s }}.pause_type(p_type text, p_key text default null) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    if p_type is null or p_type = '' then
        raise exception 'jobkit.pause_type: p_type must be a non-empty job type' using errcode = '22023';
    end if;
    insert into {{ s }}.pauses (type, key) values (p_type, p_key) on conflict do nothing;
    return found;
end
$$;

-- Resume a paused type or key and wake the workers for its due jobs. True when it was paused.
create or replace function {{ s }}.resume_type(p_type text, p_key text default null) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    delete from {{ s }}.pauses p where p.type = p_type and p.key is not distinct from p_key;
    if not found then
        return false;
    end if;
    perform {{ s }}.wake(p_type);
    return true;
end
$$;
