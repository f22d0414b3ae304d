-- The public API: finish an attempt (the worker's lifecycle)
-- sql/functions/40_finish.sql: the fenced completions, failures, snoozes, lease extensions, releases, heartbeats and progress.
-- Applied in file-name order (after 30_claim.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.

-- Complete many (id, attempt) pairs in one fenced statement. p_results null = every result null
-- (handlers that return nothing: nothing to decode, nothing to look up). Waiters are notified, and
-- the children of jobs of a graph are told (_settle_children, 48_flows.sql); a plain job pays one
-- null in an aggregate for that.
create or replace function {{ s }}.complete_jobs(p_ids uuid[], p_attempts int[], p_results jsonb[])
returns setof uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_done uuid[];
    v_parents uuid[];
begin
    with done as (
        update {{ s }}.jobs j
        set status = 'completed',
            result = case when p_results is null then null else p_results[array_position(p_ids, j.id)] end,
            completed_at = now(), lease_expires_at = null, updated_at = now()
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = p_attempts[array_position(p_ids, j.id)]
        returning j.id, j.flow_id
    )
    select array_agg(d.id), array_agg(d.id) filter (where d.flow_id is not null)
    into v_done, v_parents from done d;
    if v_done is not null then
        perform {{ s }}._notify_done(v_done);
    end if;
    if v_parents is not null then  -- jobs of a graph (0020): their children may be due now
        perform {{ s }}._settle_children(v_parents);
    end if;
    return query select unnest(v_done);
end
$$;

-- One fenced completion: true when the attempt still held the job.
create or replace function {{ s }}.complete_job(p_id uuid, p_attempt int, p_result jsonb) returns boolean
language sql volatile set search_path = '' as $$
    select exists (select 1 from {{ s }}.complete_jobs(array[p_id], array[p_attempt], array[p_result]))
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
    v_parents uuid[];
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
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error, j.flow_id
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at,
               case when c.status = 'pending' then 'retry' else 'failed' end, c.last_error
        from changed c
    )
    select array_agg(c.id), array_agg(c.status),
           array_agg(c.id) filter (where c.flow_id is not null and c.status = 'failed')
    into v_ids, v_statuses, v_parents from changed c;
    if 'failed' = any (v_statuses) then
        perform {{ s }}._notify_done(array(
            select u.id from unnest(v_ids, v_statuses) as u(id, status) where u.status = 'failed'));
    end if;
    if v_parents is not null then  -- failed jobs of a graph: their children's policies apply
        perform {{ s }}._settle_children(v_parents);
    end if;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- One fenced failure: the new status (pending = a retry is scheduled, failed), null when fenced out.
create or replace function {{ s }}.fail_job(
    p_id uuid, p_attempt int, p_error text,
    p_retry_in interval default null, p_permanent boolean default false
) returns text
language sql volatile set search_path = '' as $$
    select f.status from {{ s }}.fail_jobs(array[p_id], array[p_attempt], array[p_error],
                                           array[p_retry_in], array[p_permanent]) f
$$;

-- Put a claimed job back to pending at now() + p_delay without consuming its attempt (rate limits,
-- 429 Retry-After, a worker shutting down). Fenced like complete_job.
create or replace function {{ s }}.snooze_job(p_id uuid, p_attempt int, p_delay interval) returns boolean
language sql volatile set search_path = '' as $$
    with changed as (
        update {{ s }}.jobs j
        set status = 'pending', attempts = j.attempts - 1,
            scheduled_for = now() + greatest(coalesce(p_delay, interval '0'), interval '0'),
            lease_expires_at = null, updated_at = now()
        where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
        returning j.id, j.worker_id, j.started_at
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, p_attempt, c.worker_id, c.started_at, 'snoozed' from changed c
    )
    select exists (select 1 from changed)
$$;

-- Heartbeat: push the lease of a running attempt to at least now() + p_by. Returns the new deadline,
-- or null when the attempt no longer holds the job (stop working on it).
create or replace function {{ s }}.extend_lease(p_id uuid, p_attempt int, p_by interval) returns timestamptz
language sql volatile set search_path = '' as $$
    update {{ s }}.jobs j
    set lease_expires_at = greatest(j.lease_expires_at, now() + p_by), updated_at = now()
    where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
    returning j.lease_expires_at
$$;

-- Heartbeat many running attempts at once; returns the ids whose lease was extended.
create or replace function {{ s }}.extend_leases(p_ids uuid[], p_attempts int[], p_by interval) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    update {{ s }}.jobs j
    set lease_expires_at = greatest(j.lease_expires_at, now() + p_by), updated_at = now()
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$;

-- Hand claimed jobs back (a worker shutting down): pending again now, attempt not consumed,
-- recorded as 'released' (0009; 'snoozed' before).
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

-- Of these running attempts, the ones that no longer hold their job, with the job's status now
-- (cancelled: cancel_job stopped it; gone: deleted). Workers ask once a second, on their heartbeat.
create or replace function {{ s }}.running_check(p_ids uuid[], p_attempts int[]) returns table (id uuid, status text)
language sql stable set search_path = '' as $$
    select u.id, coalesce(j.status, 'gone')
    from unnest(p_ids, p_attempts) as u(id, attempt)
    left join {{ s }}.jobs j on j.id = u.id
    where j.id is null or j.status <> 'processing' or j.attempts <> u.attempt
$$;

-- Store the progress handlers reported (ctx.progress) for running attempts: p_progress is a JSON
-- array of objects parallel to p_ids. Fenced like extend_leases; returns the ids it updated.
create or replace function {{ s }}.set_progress(p_ids uuid[], p_attempts int[], p_progress jsonb) returns setof uuid
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

-- These jobs finished: resolve the jobs waits on them (ctx.wait_for_jobs), and tell waiters (jobkit.wait): one notification per 200 ids, only for the
-- ids someone registered with wait_on (0014), whose rows it deletes. Nobody waiting (no row at all):
-- one probe of an empty table, and no NOTIFY, whose commit-time lock serialises every committer.
create or replace function {{ s }}._notify_done(p_ids uuid[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_waited uuid[];
begin
    perform {{ s }}._jobs_finished(p_ids);  -- jobs waits (ctx.wait_for_jobs) on these: 47_waits.sql
    if not exists (select from {{ s }}.waiters) then
        return;
    end if;
    with gone as (
        delete from {{ s }}.waiters w where w.job_id operator(pg_catalog.=) any (p_ids) returning w.job_id
    )
    select pg_catalog.array_agg(g.job_id) into v_waited from gone g;
    perform pg_catalog.pg_notify({{ (schema ~ "_done") | literal }},
                                 pg_catalog.array_to_string(v_waited[i:i + 199], ','))
    from pg_catalog.generate_series(1, coalesce(pg_catalog.cardinality(v_waited), 0), 200) as i;
end
$$;

-- Register waiters (jobkit.wait, after it LISTENs on <schema>_done): the finishing statement of
-- each of these jobs sends the completion NOTIFY. p_for: how long the waiter waits at most; the row
-- then expires (prune deletes it). A job already finished is notified by no one: the waiter reads
-- its state after registering.
create or replace function {{ s }}.wait_on(p_ids uuid[], p_for interval) returns void
language plpgsql volatile set search_path = '' as $$
begin
    if p_for is null or p_for operator(pg_catalog.<) interval '0' then
        raise exception 'jobkit.wait_on: p_for must be a non-negative interval (how long you wait)'
            using errcode = '22023';
    end if;
    insert into {{ s }}.waiters as w (job_id, expires_at)
    select distinct u.id, pg_catalog.now() operator(pg_catalog.+) p_for
    from pg_catalog.unnest(p_ids) as u(id) where u.id is not null
    on conflict (job_id) do update set expires_at = greatest(w.expires_at, excluded.expires_at);
end
$$;
