-- jobkit 0006: results for the producer. `jobkit.wait()` learns that a job finished from a
-- notification on the channel '<schema>_done' (payload: the finished jobs' ids, comma-separated,
-- at most 200 per notification), sent by the statements that finish jobs: complete_jobs, fail_jobs
-- (for jobs out of attempts), cancel_job and sweep_stuck (for jobs out of attempts). One
-- notification per statement, not per job, and delivered at commit like any NOTIFY; a producer
-- behind a pooler without LISTEN polls instead. jobs.progress holds what a handler reported with
-- ctx.progress() (throttled by the worker), written by set_progress, fenced like a heartbeat.

alter table {{ s }}.jobs add column progress jsonb;
alter table {{ s }}.jobs add constraint jobs_progress_object
    check (progress is null or pg_catalog.jsonb_typeof(progress) = 'object');

-- Tell waiters (jobkit.wait) that these jobs finished: one notification per 200 ids.
create function {{ s }}._notify_done(p_ids uuid[]) returns void
language sql volatile set search_path = '' as $$
    select pg_catalog.pg_notify({{ (schema ~ "_done") | literal }},
                                pg_catalog.array_to_string(p_ids[i:i + 199], ','))
    from pg_catalog.generate_series(1, coalesce(pg_catalog.cardinality(p_ids), 0), 200) as i
$$;

-- Complete many (id, attempt) pairs in one fenced statement. p_results null = every result null
-- (handlers that return nothing: nothing to decode, nothing to look up). Waiters are notified.
create or replace function {{ s }}.complete_jobs(p_ids uuid[], p_attempts int[], p_results jsonb[])
returns setof uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_done uuid[];
begin
    with done as (
        update {{ s }}.jobs j
        set status = 'completed',
            result = case when p_results is null then null else p_results[array_position(p_ids, j.id)] end,
            completed_at = now(), lease_expires_at = null, updated_at = now()
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = p_attempts[array_position(p_ids, j.id)]
        returning j.id
    )
    select array_agg(d.id) into v_done from done d;
    if v_done is not null then
        perform {{ s }}._notify_done(v_done);
    end if;
    return query select unnest(v_done);
end
$$;

-- Record failed attempts. Each job goes back to pending after p_retry_in (default: the type's
-- backoff, never less than 1 s) while its round has attempts left and the failure is not
-- permanent, else to failed (and waiters are notified). Returns (id, new status) for the jobs the
-- attempt still held (fenced).
create or replace function {{ s }}.fail_jobs(
    p_ids uuid[], p_attempts int[], p_errors text[],
    p_retry_in interval[] default null, p_permanent boolean[] default null
) returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
#variable_conflict use_column
declare
    v_ids uuid[];
    v_statuses text[];
begin
    with input as (
        select u.id, u.attempt, u.error, p_retry_in[u.ord] as retry_in,
               not coalesce(p_permanent[u.ord], false) as may_retry
        from unnest(p_ids, p_attempts, p_errors) with ordinality as u(id, attempt, error, ord)
    ), decided as (
        select i.*, i.may_retry and j.attempts - j.round_start < {{ s }}.attempt_limit(
                   j.max_attempts, j.handler_max_attempts, coalesce(t.max_attempts, d.max_attempts)) as again
        from input i
        join {{ s }}.jobs j on j.id = i.id
        cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
        left join {{ s }}.job_types t on t.type = j.type
    ), changed as (
        update {{ s }}.jobs j
        set status = case when i.again then 'pending' else 'failed' end,
            scheduled_for = case when i.again
                then now() + greatest(coalesce(i.retry_in, {{ s }}.backoff(j.type, j.attempts - j.round_start)),
                                      interval '1 second')
                else j.scheduled_for end,
            completed_at = case when i.again then null else now() end,
            last_error = i.error, lease_expires_at = null, updated_at = now()
        from decided i
        where j.id = any (p_ids) and j.id = i.id and j.status = 'processing' and j.attempts = i.attempt
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at,
               case when c.status = 'pending' then 'retry' else 'failed' end, c.last_error
        from changed c
    )
    select array_agg(c.id), array_agg(c.status) into v_ids, v_statuses from changed c;
    if 'failed' = any (v_statuses) then
        perform {{ s }}._notify_done(array(
            select u.id from unnest(v_ids, v_statuses) as u(id, status) where u.status = 'failed'));
    end if;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- Cancel a pending or processing job. A running attempt may finish, but its result is refused.
-- Waiters are notified.
create or replace function {{ s }}.cancel_job(p_id uuid) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
begin
    with changed as (
        update {{ s }}.jobs j
        set status = 'cancelled', completed_at = now(), lease_expires_at = null, updated_at = now()
        where j.id = p_id and j.status in ('pending', 'processing')
        returning j.id, j.attempts, j.worker_id, j.started_at
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, c.attempts, c.worker_id, c.started_at, 'cancelled' from changed c
        where c.worker_id is not null and c.attempts > 0
    )
    select c.id into v_id from changed c;
    if v_id is null then
        return false;
    end if;
    perform {{ s }}._notify_done(array[v_id]);
    return true;
end
$$;

-- Processing jobs whose lease expired: back to pending with backoff while their round has attempts
-- left, else failed (and waiters are notified), so every job reaches a state. The worker is told
-- when the retries are due.
create or replace function {{ s }}.sweep_stuck() returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_statuses text[];
    v_types text[];
    v_due timestamptz[];
    r record;
begin
    with expired as (
        select e.id, {{ s }}.attempt_limit(e.max_attempts, e.handler_max_attempts,
                                          coalesce(t.max_attempts, d.max_attempts)) as round_limit
        from {{ s }}.jobs e
        cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
        left join {{ s }}.job_types t on t.type = e.type
        where e.id = any (array(
            select l.id from {{ s }}.jobs l
            where l.status = 'processing' and l.lease_expires_at < now()
            for update of l skip locked
        ))
    ), changed as (
        update {{ s }}.jobs j
        set status = case when j.attempts - j.round_start < x.round_limit then 'pending' else 'failed' end,
            scheduled_for = case when j.attempts - j.round_start < x.round_limit
                then now() + {{ s }}.backoff(j.type, j.attempts - j.round_start) else j.scheduled_for end,
            completed_at = case when j.attempts - j.round_start < x.round_limit then null else now() end,
            last_error = format('lease expired at %s (worker %s)', j.lease_expires_at, j.worker_id),
            lease_expires_at = null, updated_at = now()
        from expired x
        where j.id = x.id and j.status = 'processing' and j.lease_expires_at < now()
        returning j.id, j.status, j.type, j.scheduled_for, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at, 'lease_expired', c.last_error from changed c
    )
    select array_agg(c.id), array_agg(c.status), array_agg(c.type), array_agg(c.scheduled_for)
    into v_ids, v_statuses, v_types, v_due from changed c;
    for r in select u.type, min(u.due) as due from unnest(v_types, v_due, v_statuses) as u(type, due, status)
             where u.status = 'pending' group by u.type loop
        perform {{ s }}._wake_for(r.type, 0, r.due);
    end loop;
    if 'failed' = any (v_statuses) then
        perform {{ s }}._notify_done(array(
            select u.id from unnest(v_ids, v_statuses) as u(id, status) where u.status = 'failed'));
    end if;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- Store the progress handlers reported (ctx.progress) for running attempts: p_progress is a JSON
-- array of objects parallel to p_ids. Fenced like extend_leases; returns the ids it updated.
create function {{ s }}.set_progress(p_ids uuid[], p_attempts int[], p_progress jsonb) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    if pg_catalog.jsonb_typeof(p_progress) is distinct from 'array'
       or pg_catalog.jsonb_array_length(p_progress) <> coalesce(pg_catalog.cardinality(p_ids), 0) then
        raise exception 'jobkit.set_progress: p_progress must be a JSON array as long as p_ids'
            using errcode = '22023';
    end if;
    return query
    update {{ s }}.jobs j
    set progress = p_progress -> (array_position(p_ids, j.id) - 1)
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$;

revoke all on function {{ s }}._notify_done(uuid[]) from public;
revoke all on function {{ s }}.set_progress(uuid[], int[], jsonb) from public;
{% include "grants.sql" %}
