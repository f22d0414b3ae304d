-- jobkit 0001: the job table, the attempt history, per-type settings and the lifecycle API.
--
-- Job states (who moves a job, and when):
--   pending     waiting to run; runnable once scheduled_for <= now(). enqueue, a retry, a snooze,
--               the stuck sweep and retry_job put a job here.
--   processing  claimed by pick_jobs: attempts was incremented, a lease runs until lease_expires_at.
--               Only the claiming attempt may finish it (complete/fail are fenced on attempts).
--   completed   complete_job stored the result. Terminal; pruned after the retention.
--   failed      out of attempts (or a permanent error); sweep_dead moves it on to dead.
--   dead        dead-lettered for manual review; retry_job revives it. Pruned after the retention.
--   cancelled   cancel_job stopped it; a running attempt's late completion is refused.

create table {{ s }}.jobs (
    id               uuid primary key default gen_random_uuid(),
    type             text not null,
    payload          jsonb not null,
    status           text not null default 'pending'
                     check (status in ('pending', 'processing', 'completed', 'failed', 'dead', 'cancelled')),
    priority         int not null default 0,
    attempts         int not null default 0 check (attempts >= 0),
    max_attempts     int not null default 3 check (max_attempts >= 1),
    last_error       text,
    result           jsonb,
    scheduled_for    timestamptz not null default now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    created_at       timestamptz not null default now(),
    lease_expires_at timestamptz,
    worker_id        text,
    idempotency_key  text,
    updated_at       timestamptz not null default now(),
    constraint jobs_type_not_empty check (type <> ''),
    constraint jobs_lease_when_processing check (status <> 'processing' or lease_expires_at is not null)
) with (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

comment on table {{ s }}.jobs is 'jobkit jobs: one row per job; see the state notes in migration 0001.';

-- Claims walk runnable rows in (priority desc, scheduled_for) order. A retry waiting in the future sorts
-- after every job of its priority that is due now, so the claim's index scan meets runnable rows first
-- and stops at LIMIT however many retries are parked in the future (the seed's created_at index made
-- every claim step over them).
create index jobs_claim_idx on {{ s }}.jobs (type, priority desc, scheduled_for)
    where status = 'pending';
-- "Is there runnable work of this type?" (wake-ups, status) in one index probe.
create index jobs_due_idx on {{ s }}.jobs (type, scheduled_for) where status = 'pending';
-- The stuck sweep reads only expired leases. (Only processing jobs have one. The predicate is on
-- the lease, not on the status, so that fenced completions, which filter on status = 'processing',
-- probe the primary key instead of walking this index's entries of finished jobs.)
create index jobs_lease_idx on {{ s }}.jobs (lease_expires_at) where lease_expires_at is not null;
-- The dead sweep and prune read only finished rows, oldest first.
create index jobs_failed_idx on {{ s }}.jobs (completed_at) where status = 'failed';
create index jobs_finished_idx on {{ s }}.jobs (completed_at)
    where status in ('completed', 'dead', 'cancelled');
-- One unfinished job per (type, idempotency key).
create unique index jobs_idempotency_idx on {{ s }}.jobs (type, idempotency_key)
    where idempotency_key is not null and status in ('pending', 'processing');

-- Every attempt, so no failure disappears when the next attempt overwrites jobs.last_error.
create table {{ s }}.job_attempts (
    id          bigint generated always as identity primary key,
    job_id      uuid not null,
    attempt     int not null,
    worker_id   text,
    started_at  timestamptz,
    finished_at timestamptz not null default now(),
    outcome     text not null
                check (outcome in ('completed', 'retry', 'failed', 'snoozed', 'lease_expired', 'cancelled')),
    error       text,
    duration    interval generated always as (finished_at - started_at) stored
) with (autovacuum_vacuum_insert_scale_factor = 0.02);
create index job_attempts_job_idx on {{ s }}.job_attempts (job_id, attempt);

-- Per-type settings, synced from jobkit.toml by `jobkit deploy`. The row '*' holds the defaults.
create table {{ s }}.job_types (
    type           text primary key,
    max_attempts   int not null check (max_attempts between 1 and 1000),
    lease          interval not null check (lease >= interval '1 second'),
    backoff_base   interval not null check (backoff_base >= interval '1 second'),
    backoff_factor float8 not null check (backoff_factor between 1 and 100),
    backoff_cap    interval not null check (backoff_cap >= backoff_base),
    backoff_jitter float8 not null check (backoff_jitter >= 0 and backoff_jitter < 1)
);
insert into {{ s }}.job_types values ('*', 3, '5 minutes', '30 seconds', 4, '1 hour', 0.1);

-- The settings of one type: its own row, else the defaults row.
create function {{ s }}.type_settings(p_type text) returns {{ s }}.job_types
language plpgsql stable set search_path = '' as $$
declare
    v_row {{ s }}.job_types;
begin
    -- plpgsql, not sql: its plan is cached per session (a sql function is planned on every call).
    select t.* into v_row from {{ s }}.job_types t
    where t.type in (p_type, '*')
    order by t.type = '*'
    limit 1;
    return v_row;
end
$$;

-- Retry delay for an attempt that just failed: base * factor^(attempt-1), capped, ± jitter, >= 1 s.
create function {{ s }}.backoff(p_type text, p_attempt int) returns interval
language sql volatile set search_path = '' as $$
    select make_interval(secs => greatest(1.0,
        least(extract(epoch from c.backoff_cap)::float8,
              extract(epoch from c.backoff_base)::float8
                * power(c.backoff_factor, least(greatest(p_attempt, 1) - 1, 100)))
        * (1 + c.backoff_jitter * (2 * random() - 1))))
    from {{ s }}.type_settings(p_type) c
$$;

-- Enqueue one job. With an idempotency key, an unfinished job of the same type and key is returned
-- instead of a new one. p_max_attempts null = the type's configured max_attempts.
create function {{ s }}.enqueue(
    p_type text,
    p_payload jsonb,
    p_priority int default 0,
    p_run_at timestamptz default now(),
    p_max_attempts int default null,
    p_idempotency_key text default null
) returns uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
begin
    if p_type is null or p_type = '' then
        raise exception 'jobkit.enqueue: p_type must be a non-empty job type' using errcode = '22023';
    end if;
    if p_payload is null then
        raise exception 'jobkit.enqueue: p_payload must not be null (use ''{}''::jsonb)' using errcode = '22023';
    end if;
    loop
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, idempotency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()),
                coalesce(p_max_attempts, ({{ s }}.type_settings(p_type)).max_attempts), p_idempotency_key)
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
        returning id into v_id;
        if v_id is not null then
            return v_id;
        end if;
        select j.id into v_id from {{ s }}.jobs j
        where j.type = p_type and j.idempotency_key = p_idempotency_key
          and j.status in ('pending', 'processing');
        if v_id is not null then
            return v_id;
        end if;
        -- The holder of the key finished between our insert and our look-up: insert again.
    end loop;
end
$$;

-- Enqueue many jobs in one statement. Arrays are parallel (null arrays or elements = defaults); ids
-- come back with their 1-based position in the input; a repeated idempotency key gets the id of the
-- unfinished job that holds it, whether that job is older or earlier in the same batch.
create function {{ s }}.enqueue_many(
    p_type text[],
    p_payload jsonb[],
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null
) returns table (ord bigint, id uuid)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    if cardinality(p_type) is distinct from cardinality(p_payload) then
        raise exception 'jobkit.enqueue_many: p_type and p_payload must have the same length'
            using errcode = '22023';
    end if;
    if array_position(p_type, null) is not null or array_position(p_payload, null) is not null
       or array_position(p_type, '') is not null then
        raise exception 'jobkit.enqueue_many: job types and payloads must be non-empty and not null'
            using errcode = '22023';
    end if;
    if p_idempotency_key is null or cardinality(array_remove(p_idempotency_key, null)) = 0 then
        -- No keys: one plain insert, ids generated up front and returned in input order.
        return query
        with input as materialized (
            select u.ord, gen_random_uuid() as new_id, u.type, u.payload,
                   coalesce(p_priority[u.ord], 0) as priority,
                   coalesce(p_run_at[u.ord], now()) as run_at,
                   coalesce(p_max_attempts[u.ord], t.max_attempts, d.max_attempts) as max_attempts
            from unnest(p_type, p_payload) with ordinality as u(type, payload, ord)
            cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
            left join {{ s }}.job_types t on t.type = u.type
        ), inserted as (
            insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts)
            select i.new_id, i.type, i.payload, i.priority, i.run_at, i.max_attempts from input i
        )
        select i.ord, i.new_id from input i order by i.ord;
        return;
    end if;
    with input as materialized (
        select u.ord, gen_random_uuid() as new_id, u.type, u.payload,
               coalesce(p_priority[u.ord], 0) as priority,
               coalesce(p_run_at[u.ord], now()) as run_at,
               coalesce(p_max_attempts[u.ord], t.max_attempts, d.max_attempts) as max_attempts,
               p_idempotency_key[u.ord] as key
        from unnest(p_type, p_payload) with ordinality as u(type, payload, ord)
        cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
        left join {{ s }}.job_types t on t.type = u.type
    ), inserted as (
        insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, idempotency_key)
        select i.new_id, i.type, i.payload, i.priority, i.run_at, i.max_attempts, i.key
        from input i order by i.ord
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
        returning jobs.id, jobs.type, jobs.idempotency_key
    )
    select array_agg(coalesce(x.id, y.id, e.id) order by i.ord) into v_ids
    from input i
    left join inserted x on x.id = i.new_id
    left join inserted y on i.key is not null and y.type = i.type and y.idempotency_key = i.key
    left join lateral (
        select j.id from {{ s }}.jobs j
        where i.key is not null and j.type = i.type and j.idempotency_key = i.key
          and j.status in ('pending', 'processing')
    ) e on true;
    -- A key held by a transaction that committed after this statement's snapshot: resolve it anew.
    for k in 1 .. coalesce(cardinality(v_ids), 0) loop
        if v_ids[k] is null then
            v_ids[k] := {{ s }}.enqueue(p_type[k], p_payload[k], p_priority[k], p_run_at[k],
                                        p_max_attempts[k], p_idempotency_key[k]);
        end if;
    end loop;
    return query select u.ord, u.id from unnest(v_ids) with ordinality as u(id, ord);
end
$$;

-- Claim up to p_limit runnable jobs of one type for p_worker, for p_lease, in one statement.
create function {{ s }}.pick_jobs(p_type text, p_limit int, p_worker text, p_lease interval)
returns setof {{ s }}.jobs
language plpgsql volatile set search_path = '' as $$
begin
    if p_lease is null or p_lease < interval '1 second' then
        raise exception 'jobkit.pick_jobs: p_lease must be at least 1 second' using errcode = '22023';
    end if;
    return query
    with claimed as (
        update {{ s }}.jobs j
        set status = 'processing',
            attempts = j.attempts + 1,
            started_at = now(),
            lease_expires_at = now() + p_lease,
            worker_id = p_worker,
            updated_at = now()
        where j.id = any (array(
            select c.id from {{ s }}.jobs c
            where c.type = p_type and c.status = 'pending' and c.scheduled_for <= now()
            order by c.priority desc, c.scheduled_for
            limit greatest(p_limit, 0)
            for update skip locked
        ))
        returning j.*
    )
    select * from claimed c order by c.priority desc, c.scheduled_for;
end
$$;

-- The seed's signature: claim one job with the type's configured lease.
create function {{ s }}.pick_job(p_type text) returns setof {{ s }}.jobs
language sql volatile set search_path = '' as $$
    select * from {{ s }}.pick_jobs(p_type, 1, 'pick_job', ({{ s }}.type_settings(p_type)).lease)
$$;

-- Finish many claimed jobs; returns the ids whose completion was accepted (fenced on attempt).
create function {{ s }}.complete_jobs(p_ids uuid[], p_attempts int[], p_results jsonb[])
returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    -- Rows are found through the primary key (id = any) and matched to their input by position:
    -- no join for the planner to misjudge.
    with done as (
        update {{ s }}.jobs j
        set status = 'completed', result = p_results[array_position(p_ids, j.id)], completed_at = now(),
            lease_expires_at = null, updated_at = now()
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = p_attempts[array_position(p_ids, j.id)]
        returning j.id, j.attempts, j.worker_id, j.started_at
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select d.id, d.attempts, d.worker_id, d.started_at, 'completed' from done d
    )
    select d.id from done d;
end
$$;

create function {{ s }}.complete_job(p_id uuid, p_attempt int, p_result jsonb) returns boolean
language sql volatile set search_path = '' as $$
    select exists (select 1 from {{ s }}.complete_jobs(array[p_id], array[p_attempt], array[p_result]))
$$;

-- Record failed attempts. Each job goes back to pending after p_retry_in (default: the type's backoff,
-- never less than 1 s) while attempts remain and the failure is not permanent, else to failed.
-- Returns (id, new status) for the jobs whose attempt still held them (fenced).
create function {{ s }}.fail_jobs(
    p_ids uuid[], p_attempts int[], p_errors text[],
    p_retry_in interval[] default null, p_permanent boolean[] default null
) returns table (id uuid, status text)
language sql volatile set search_path = '' as $$
    with input as (
        select u.id, u.attempt, u.error, p_retry_in[u.ord] as retry_in,
               coalesce(p_permanent[u.ord], false) as permanent
        from unnest(p_ids, p_attempts, p_errors) with ordinality as u(id, attempt, error, ord)
    ), changed as (
        update {{ s }}.jobs j
        set status = case when not i.permanent and j.attempts < j.max_attempts
                          then 'pending' else 'failed' end,
            scheduled_for = case when not i.permanent and j.attempts < j.max_attempts
                then now() + greatest(coalesce(i.retry_in, {{ s }}.backoff(j.type, j.attempts)),
                                      interval '1 second')
                else j.scheduled_for end,
            completed_at = case when not i.permanent and j.attempts < j.max_attempts
                                then null else now() end,
            last_error = i.error, lease_expires_at = null, updated_at = now()
        from input i
        where j.id = any (p_ids) and j.id = i.id and j.status = 'processing' and j.attempts = i.attempt
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at,
               case when c.status = 'pending' then 'retry' else 'failed' end, c.last_error
        from changed c
    )
    select c.id, c.status from changed c
$$;

create function {{ s }}.fail_job(
    p_id uuid, p_attempt int, p_error text,
    p_retry_in interval default null, p_permanent boolean default false
) returns text
language sql volatile set search_path = '' as $$
    select f.status from {{ s }}.fail_jobs(array[p_id], array[p_attempt], array[p_error],
                                           array[p_retry_in], array[p_permanent]) f
$$;

-- Put a claimed job back to pending at now() + p_delay without consuming its attempt (rate limits,
-- 429 Retry-After, a worker shutting down). Fenced like complete_job.
create function {{ s }}.snooze_job(p_id uuid, p_attempt int, p_delay interval) returns boolean
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
create function {{ s }}.extend_lease(p_id uuid, p_attempt int, p_by interval) returns timestamptz
language sql volatile set search_path = '' as $$
    update {{ s }}.jobs j
    set lease_expires_at = greatest(j.lease_expires_at, now() + p_by), updated_at = now()
    where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
    returning j.lease_expires_at
$$;

-- Processing jobs whose lease expired: back to pending with backoff while attempts remain, else
-- failed. Every such job reaches a state; the seed left exhausted ones in processing forever.
create function {{ s }}.sweep_stuck() returns table (id uuid, status text)
language sql volatile set search_path = '' as $$
    with changed as (
        update {{ s }}.jobs j
        set status = case when j.attempts < j.max_attempts then 'pending' else 'failed' end,
            scheduled_for = case when j.attempts < j.max_attempts
                then now() + {{ s }}.backoff(j.type, j.attempts) else j.scheduled_for end,
            completed_at = case when j.attempts < j.max_attempts then null else now() end,
            last_error = format('lease expired at %s (worker %s)', j.lease_expires_at, j.worker_id),
            lease_expires_at = null, updated_at = now()
        where j.id = any (array(
            select e.id from {{ s }}.jobs e
            where e.status = 'processing' and e.lease_expires_at < now()
            for update skip locked
        ))
          and j.status = 'processing'
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at, 'lease_expired', c.last_error from changed c
    )
    select c.id, c.status from changed c
$$;

-- Dead-letter failed jobs; returns how many moved.
create function {{ s }}.sweep_dead() returns bigint
language sql volatile set search_path = '' as $$
    with moved as (
        update {{ s }}.jobs j set status = 'dead', updated_at = now()
        where j.id = any (array(
            select f.id from {{ s }}.jobs f where f.status = 'failed' for update skip locked
        ))
          and j.status = 'failed'
        returning 1
    )
    select count(*) from moved
$$;

-- Run a failed, dead or cancelled job again now, with a fresh round of the type's max_attempts.
create function {{ s }}.retry_job(p_id uuid) returns boolean
language sql volatile set search_path = '' as $$
    with changed as (
        update {{ s }}.jobs j
        set status = 'pending', scheduled_for = now(), completed_at = null,
            max_attempts = j.attempts + ({{ s }}.type_settings(j.type)).max_attempts, updated_at = now()
        where j.id = p_id and j.status in ('failed', 'dead', 'cancelled')
        returning 1
    )
    select exists (select 1 from changed)
$$;

-- Cancel a pending or processing job. A running attempt may finish, but its result is refused.
create function {{ s }}.cancel_job(p_id uuid) returns boolean
language sql volatile set search_path = '' as $$
    with changed as (
        update {{ s }}.jobs j
        set status = 'cancelled', completed_at = now(), lease_expires_at = null, updated_at = now()
        where j.id = p_id and j.status in ('pending', 'processing')
        returning j.id, j.status as old_status, j.attempts, j.worker_id, j.started_at
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, c.attempts, c.worker_id, c.started_at, 'cancelled' from changed c
        where c.worker_id is not null and c.attempts > 0
    )
    select exists (select 1 from changed)
$$;

-- Delete finished jobs (completed, dead, cancelled) older than p_older_than, with their attempt
-- history, p_batch_size rows per statement; rows another session holds are skipped, never waited on.
-- Stops after p_max_batches. Returns the number of jobs deleted.
create function {{ s }}.prune(
    p_older_than interval, p_batch_size int default 5000, p_max_batches int default 100
) returns bigint
language plpgsql volatile set search_path = '' as $$
declare
    v_total bigint := 0;
    v_ids uuid[];
begin
    if p_older_than is null or p_older_than < interval '0' then
        raise exception 'jobkit.prune: p_older_than must be a non-negative interval' using errcode = '22023';
    end if;
    for i in 1 .. greatest(p_max_batches, 1) loop
        with gone as (
            delete from {{ s }}.jobs j
            where j.id = any (array(
                select v.id from {{ s }}.jobs v
                where v.status in ('completed', 'dead', 'cancelled')
                  and v.completed_at < now() - p_older_than
                order by v.completed_at
                limit p_batch_size
                for update skip locked
            ))
            returning j.id
        )
        select array_agg(g.id) into v_ids from gone g;
        exit when v_ids is null;
        delete from {{ s }}.job_attempts a where a.job_id = any (v_ids);
        v_total := v_total + cardinality(v_ids);
        exit when cardinality(v_ids) < p_batch_size;
    end loop;
    return v_total;
end
$$;

-- Security: nothing for PUBLIC, anon or authenticated; everything jobkit needs for service_role.
alter table {{ s }}.jobs enable row level security;
alter table {{ s }}.job_attempts enable row level security;
alter table {{ s }}.job_types enable row level security;
revoke all on all tables in schema {{ s }} from public;
revoke all on all sequences in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
