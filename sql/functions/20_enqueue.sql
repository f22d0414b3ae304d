-- The public API: enqueue
-- sql/functions/20_enqueue.sql: enqueue, enqueue_many, enqueue_json, and the debounce/throttle windows.
-- Applied in file-name order (after 10_policy.sql, before 30_claim.sql); sql/functions/README.md says how deploy applies these files.

-- Enqueue one job. With an idempotency key, an unfinished job of the same type and key is returned
-- instead of a new one. p_max_attempts null: decided when it runs (the handler's, else the type's).
-- p_trace_context: the enqueuer's W3C trace context (an object such as {"traceparent": "00-..."}),
-- handed to the worker with the claim so that its spans continue the enqueuer's trace.
-- p_concurrency_key null: the type's key template, else '' for a fair type, else none. p_debounce /
-- p_throttle: see _enqueue_windowed.
create or replace function {{ s }}.enqueue(
    p_type text,
    p_payload jsonb,
    p_priority int default 0,
    p_run_at timestamptz default now(),
    p_max_attempts int default null,
    p_idempotency_key text default null,
    p_trace_context jsonb default null,
    p_concurrency_key text default null,
    p_debounce interval default null,
    p_throttle interval default null
) returns uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_key text;
begin
    if p_type is null or p_type = '' then
        raise exception 'jobkit.enqueue: p_type must be a non-empty job type' using errcode = '22023';
    end if;
    if p_payload is null then
        raise exception 'jobkit.enqueue: p_payload must not be null (use ''{}''::jsonb)' using errcode = '22023';
    end if;
    -- _job_key inlined (issue 23): a type without a key template or fairness costs one probe of
    -- job_types and no function call. key_template implies fair (job_types_limits_need_fair).
    if p_idempotency_key is null and p_debounce is null and p_throttle is null then
        -- nothing to conflict on: a plain insert, the key's probe inside it (one statement fewer:
        -- -20,000 instructions a single enqueue, issue 23)
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, trace_context,
                                  concurrency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_trace_context,
                coalesce(p_concurrency_key,
                         (select case when t.key_template is not null
                                      then {{ s }}._render_key(t.key_template, p_payload) else '' end
                          from {{ s }}.job_types t where t.type = p_type and t.fair)))
        returning id into v_id;
        return v_id;
    end if;
    v_key := p_concurrency_key;
    if v_key is null then
        select case when t.key_template is not null then {{ s }}._render_key(t.key_template, p_payload)
                    else '' end
        into v_key from {{ s }}.job_types t where t.type = p_type and t.fair;
    end if;
    if p_debounce is not null or p_throttle is not null then
        return {{ s }}._enqueue_windowed(p_type, p_payload, p_priority, p_run_at, p_max_attempts,
                                        p_idempotency_key, v_key, p_debounce, p_throttle,
                                        p_trace_context);
    end if;
    loop
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, idempotency_key,
                                  trace_context, concurrency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_idempotency_key, p_trace_context, v_key)
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

-- Debounce (p_debounce: a pending job of the key takes the new payload, and the new enqueuer's
-- trace context, and runs p_debounce after this enqueue) and throttle (p_throttle: one job per key
-- per window; later enqueues return its id). p_trace_context since 0008.
create or replace function {{ s }}._enqueue_windowed(
    p_type text, p_payload jsonb, p_priority int, p_run_at timestamptz, p_max_attempts int,
    p_idempotency_key text, p_key text, p_debounce interval, p_throttle interval,
    p_trace_context jsonb
) returns uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_new uuid := gen_random_uuid();
begin
    if p_key is null then
        raise exception 'jobkit.enqueue: debounce and throttle need a concurrency key (p_concurrency_key, or the type''s concurrency_key template)'
            using errcode = '22023';
    end if;
    if p_debounce is not null and p_throttle is not null then
        raise exception 'jobkit.enqueue: give p_debounce or p_throttle, not both' using errcode = '22023';
    end if;
    if p_idempotency_key is not null then
        raise exception 'jobkit.enqueue: an idempotency key cannot be combined with debounce or throttle'
            using errcode = '22023';
    end if;
    if coalesce(p_debounce, p_throttle) < interval '0' then
        raise exception 'jobkit.enqueue: debounce and throttle must not be negative' using errcode = '22023';
    end if;
    if p_throttle is not null then
        -- The first enqueue of a window takes it; the conflicting row is locked even when the
        -- window is still open, so the look-up below sees its committed holder.
        insert into {{ s }}.enqueue_windows as w (type, kind, key, job_id, until)
        values (p_type, 'throttle', p_key, v_new, now() + p_throttle)
        on conflict (type, kind, key) do update set job_id = excluded.job_id, until = excluded.until
            where w.until <= now()
        returning w.job_id into v_id;
        if v_id is null then
            select w.job_id into v_id from {{ s }}.enqueue_windows w
            where w.type = p_type and w.kind = 'throttle' and w.key = p_key;
            return v_id;
        end if;
        insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, concurrency_key,
                                  trace_context)
        values (v_new, p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts, p_key,
                p_trace_context);
        return v_new;
    end if;
    -- Debounce: lock the key's row (created on first use), then move its pending job or add one.
    insert into {{ s }}.enqueue_windows as w (type, kind, key) values (p_type, 'debounce', p_key)
    on conflict (type, kind, key) do update set kind = excluded.kind
    returning w.job_id into v_id;
    if v_id is not null then
        update {{ s }}.jobs j
        set payload = p_payload, scheduled_for = now() + p_debounce, priority = coalesce(p_priority, 0),
            max_attempts = p_max_attempts, trace_context = p_trace_context, updated_at = now()
        where j.id = v_id and j.status = 'pending';
        if found then
            update {{ s }}.enqueue_windows w set until = now() + p_debounce
            where w.type = p_type and w.kind = 'debounce' and w.key = p_key;
            return v_id;
        end if;
    end if;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, concurrency_key,
                              trace_context)
    values (v_new, p_type, p_payload, coalesce(p_priority, 0), now() + p_debounce, p_max_attempts, p_key,
            p_trace_context);
    update {{ s }}.enqueue_windows w set job_id = v_new, until = now() + p_debounce
    where w.type = p_type and w.kind = 'debounce' and w.key = p_key;
    return v_new;
end
$$;

-- Enqueue many jobs in one statement. Arrays are parallel (null arrays or elements = defaults); ids
-- come back with their 1-based position in the input; a repeated idempotency key gets the id of the
-- unfinished job that holds it, whether that job is older or earlier in the same batch.
-- p_trace_context (one object, not an array): the enqueuer's trace context, stored on every new job.
create or replace function {{ s }}.enqueue_many(
    p_type text[],
    p_payload jsonb[],
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null,
    p_trace_context jsonb default null,
    p_concurrency_key text[] default null
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
    with input as materialized (
        select u.ord, gen_random_uuid() as new_id, u.type, u.payload,
               coalesce(p_priority[u.ord], 0) as priority,
               coalesce(p_run_at[u.ord], now()) as run_at,
               p_max_attempts[u.ord] as max_attempts,
               p_idempotency_key[u.ord] as key,
               coalesce(p_concurrency_key[u.ord],
                        case when t.key_template is not null then {{ s }}._render_key(t.key_template, u.payload) end,
                        case when t.fair then '' end) as concurrency_key
        from unnest(p_type, p_payload) with ordinality as u(type, payload, ord)
        left join {{ s }}.job_types t on t.type = u.type
    ), inserted as (
        insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, idempotency_key,
                                  trace_context, concurrency_key)
        select i.new_id, i.type, i.payload, i.priority, i.run_at, i.max_attempts, i.key, p_trace_context,
               i.concurrency_key
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
                                        p_max_attempts[k], p_idempotency_key[k], p_trace_context,
                                        p_concurrency_key[k]);
        end if;
    end loop;
    return query select u.ord, u.id from unnest(v_ids) with ordinality as u(id, ord);
end
$$;

-- Bulk enqueue as the Python client sends it: types and payloads as JSON documents (types: an array,
-- or one string for all), the other columns as arrays (null = defaults). Without idempotency keys
-- the rows are inserted straight from the documents (no jsonb[] built in between); with keys it is
-- enqueue_many. Returns the ids in input order. p_trace_context: as enqueue_many's. p_ids (issue 23):
-- the new jobs' ids drawn by the caller, one a job (the Python client's: one os.urandom, version-4
-- bits set, sent as a binary array); used on the plain path only (a keyed or fair batch draws its
-- own); null: drawn here with gen_random_uuid(), which costs 8,600 instructions a job.
create or replace function {{ s }}.enqueue_json(
    p_types jsonb,
    p_payloads jsonb,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null,
    p_trace_context jsonb default null,
    p_concurrency_key text[] default null,
    p_ids uuid[] default null
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
    if pg_catalog.cardinality(p_ids) <> jsonb_array_length(p_payloads) then
        raise exception 'jobkit.enqueue_json: p_ids must hold one id a job' using errcode = '22023';
    end if;
    if (p_idempotency_key is not null and cardinality(array_remove(p_idempotency_key, null)) > 0)
       or (p_concurrency_key is not null and cardinality(array_remove(p_concurrency_key, null)) > 0)
       or exists (select 1 from {{ s }}.job_types t where t.fair and p_types ? t.type) then
        return query select e.id from {{ s }}.enqueue_many(
            case when jsonb_typeof(p_types) = 'string'
                 then array_fill(p_types #>> '{}', array[jsonb_array_length(p_payloads)])
                 else array(select jsonb_array_elements_text(p_types)) end,
            array(select jsonb_array_elements(p_payloads)),
            p_priority, p_run_at, p_max_attempts, p_idempotency_key, p_trace_context, p_concurrency_key) e
        order by e.ord;
        return;
    end if;
    -- Ids are drawn first, so they come back in input order whatever order the insert runs in.
    v_ids := p_ids;
    if v_ids is null then
        v_ids := array(select gen_random_uuid() from generate_series(1, jsonb_array_length(p_payloads)));
    end if;
    v_one := case when jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, trace_context)
    select v_ids[e.n], coalesce(v_one, p_types ->> (e.n - 1)::int), e.v, coalesce(p_priority[e.n], 0),
           coalesce(p_run_at[e.n], now()), p_max_attempts[e.n], p_trace_context
    from jsonb_array_elements(p_payloads) with ordinality as e(v, n);
    return query select u.id from unnest(v_ids) as u(id);
end
$$;
