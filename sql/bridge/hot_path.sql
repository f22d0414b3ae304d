-- Upgrade bridge, step for a deployment of 0001_core..0003_worker (main at d02410c..e695ca2, or a
-- deploy of ede9fd6 that stopped before 0004) or of an earlier 0004_hot_path (main at 5629121,
-- c1f365e..4654198, b0c33b0..54a6fbf): the 0004_hot_path of main at ede9fd6, made repeatable so that
-- it also replaces what those earlier versions of it built (if exists / or replace; the functions
-- and the view keep their signatures and columns). Indexes are only dropped; nothing scans jobs.
--
-- jobkit 0004: less work per job on the hot path (figures in docs/BENCHMARKS.md).
--
-- A completed attempt is recorded once, on the job row itself (result, attempts, worker_id,
-- started_at, completed_at): job_attempts now holds the attempts that did not complete their job
-- (retries, failures, snoozes, expired leases, cancellations), and the view job_history shows every
-- attempt. The history insert was a fifth of the database's work per job.
-- Fewer indexes on pending rows: jobs_due_idx is dropped (jobs_claim_idx answers the same questions).
-- Lookups that went through SET search_path helper functions (each call switches the search path,
-- which re-validates cached plans) are inlined as plain subqueries in enqueue, the claim and the
-- insert trigger.

-- "Is there due work of this type?" and the pending-types skip scan use jobs_claim_idx, which has
-- the same leading column and predicate; a second index on pending rows cost every enqueue, retry
-- and snooze an index insert (8% of a bulk enqueue).
drop index if exists {{ s }}.jobs_due_idx;

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

-- Complete many (id, attempt) pairs in one fenced statement. p_results null = every result null
-- (handlers that return nothing: nothing to decode, nothing to look up).
create or replace function {{ s }}.complete_jobs(p_ids uuid[], p_attempts int[], p_results jsonb[])
returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    update {{ s }}.jobs j
    set status = 'completed',
        result = case when p_results is null then null else p_results[array_position(p_ids, j.id)] end,
        completed_at = now(), lease_expires_at = null, updated_at = now()
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$;

-- The claim, with the type's rate-limit key read in place and the claim statement inline (0003
-- called _claim, a nested SET search_path function). A rate-limited claim first takes tokens for the
-- due jobs it can see and gives back the ones it did not use.
create or replace function {{ s }}.claim_jobs(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null
) returns setof {{ s }}.jobs
language plpgsql volatile set search_path = '' as $$
declare
    v_key text := p_rate_key;
    v_limit int := greatest(p_limit, 0);
    v_claimed int;
begin
    if p_lease is null or p_lease < interval '1 second' then
        raise exception 'jobkit.claim_jobs: p_lease must be at least 1 second' using errcode = '22023';
    end if;
    if v_key is null then
        v_key := (select t.rate_limit from {{ s }}.job_types t where t.type in (p_type, '*')
                  order by t.type = '*' limit 1);
    end if;
    if v_key is not null then
        -- Take tokens only for jobs that exist: count the due ones first (cheap, bounded by p_limit).
        select count(*) into v_claimed from (
            select 1 from {{ s }}.jobs j
            where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit v_limit
        ) due;
        v_limit := {{ s }}.take_tokens(v_key, v_claimed);
        if v_limit = 0 then
            return;
        end if;
    end if;
    return query
    with claimed as (
        update {{ s }}.jobs j
        set status = 'processing', attempts = j.attempts + 1, started_at = now(),
            lease_expires_at = now() + p_lease, worker_id = p_worker, updated_at = now()
        where j.id = any (array(
            select c.id from {{ s }}.jobs c
            where c.type = p_type and c.status = 'pending' and c.scheduled_for <= now()
            order by c.priority desc, c.scheduled_for
            limit v_limit
            for update skip locked
        ))
        returning j.*
    )
    select * from claimed c order by c.priority desc, c.scheduled_for;
    if v_key is not null then
        get diagnostics v_claimed = row_count;
        perform {{ s }}.return_tokens(v_key, v_limit - v_claimed);
    end if;
end
$$;

-- Nothing calls it any more.
drop function if exists {{ s }}._claim(text, int, text, interval);

-- enqueue as in 0001, with the type's max_attempts read in place.
create or replace function {{ s }}.enqueue(
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
    if p_idempotency_key is null then  -- nothing to conflict on: a plain insert
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()),
                coalesce(p_max_attempts, (select t.max_attempts from {{ s }}.job_types t
                                          where t.type in (p_type, '*') order by t.type = '*' limit 1)))
        returning id into v_id;
        return v_id;
    end if;
    loop
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, idempotency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()),
                coalesce(p_max_attempts, (select t.max_attempts from {{ s }}.job_types t
                                          where t.type in (p_type, '*') order by t.type = '*' limit 1)),
                p_idempotency_key)
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

-- Bulk enqueue as the Python client sends it: types and payloads as JSON documents (types: an array,
-- or one string for all), the other columns as arrays (null = defaults). Without idempotency keys
-- the rows are inserted straight from the documents (no jsonb[] built in between: 10% of a
-- 1,000-job batch); with keys it is enqueue_many. Returns the ids in input order.
create or replace function {{ s }}.enqueue_json(
    p_types jsonb,
    p_payloads jsonb,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null
) returns setof uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_one text;
begin
    if jsonb_typeof(p_payloads) is distinct from 'array' or jsonb_typeof(p_types) not in ('array', 'string') then
        raise exception 'jobkit.enqueue_json: p_payloads must be a JSON array, p_types a JSON array or string'
            using errcode = '22023';
    end if;
    if jsonb_typeof(p_types) = 'array' and jsonb_array_length(p_types) <> jsonb_array_length(p_payloads) then
        raise exception 'jobkit.enqueue_json: p_types and p_payloads must have the same length'
            using errcode = '22023';
    end if;
    if p_idempotency_key is not null and cardinality(array_remove(p_idempotency_key, null)) > 0 then
        return query select e.id from {{ s }}.enqueue_many(
            case when jsonb_typeof(p_types) = 'string'
                 then array_fill(p_types #>> '{}', array[jsonb_array_length(p_payloads)])
                 else array(select jsonb_array_elements_text(p_types)) end,
            array(select jsonb_array_elements(p_payloads)),
            p_priority, p_run_at, p_max_attempts, p_idempotency_key) e
        order by e.ord;
        return;
    end if;
    -- Ids are drawn first, so they come back in input order whatever order the insert runs in.
    v_ids := array(select gen_random_uuid() from generate_series(1, jsonb_array_length(p_payloads)));
    v_one := case when jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts)
    select v_ids[i.n], i.type, i.payload, coalesce(p_priority[i.n], 0), coalesce(p_run_at[i.n], now()),
           coalesce(p_max_attempts[i.n], t.max_attempts, d.max_attempts)
    from (
        select e.n, coalesce(v_one, p_types ->> (e.n - 1)::int) as type, e.v as payload
        from jsonb_array_elements(p_payloads) with ordinality as e(v, n)
    ) i
    cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
    left join {{ s }}.job_types t on t.type = i.type;
    return query select u.id from unnest(v_ids) as u(id);
end
$$;

-- The insert trigger as in 0002, reading the type's switch and the transport settings in place;
-- NOTIFY is sent from here, pg_net calls still go through _wake_http (which records them).
-- (Measured with pgbench: a combined query over the transition table was slower than these
-- separate, simply planned statements.)
create or replace function {{ s }}.jobs_wake_on_insert() returns trigger
language plpgsql security definer set search_path = '' as $$
declare
    v_type text;
    v_transport text;
    v_channel text;
    v_batch int;
begin
    for v_type in
        select distinct n.type from new_jobs n
        where n.status = 'pending' and n.scheduled_for <= now()
    loop
        continue when not coalesce((select t.wake_on_insert from {{ s }}.job_types t
                                    where t.type in (v_type, '*') order by t.type = '*' limit 1), false);
        if v_transport is null then
            select max(s.value #>> '{}') filter (where s.key = 'transport'),
                   max(s.value #>> '{}') filter (where s.key = 'channel'),
                   max((s.value #>> '{}')::int) filter (where s.key = 'batch_size')
            into v_transport, v_channel, v_batch
            from {{ s }}.settings s where s.key in ('transport', 'channel', 'batch_size');
        end if;
        if v_transport = 'pg_net' then
            perform {{ s }}._wake_http(v_type, 1, v_batch);
        else
            perform pg_notify(v_channel,
                              json_build_object('type', v_type, 'calls', 1, 'max_jobs', v_batch)::text);
        end if;
    end loop;
    return null;
end
$$;

revoke all on all tables in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
