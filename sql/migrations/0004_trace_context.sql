-- jobkit 0004: the enqueuer's OpenTelemetry trace context travels with the job. jobs.trace_context
-- holds the W3C carrier ({"traceparent": ..., "tracestate": ...}) the enqueuer's propagator wrote, or
-- null (tracing not configured, or a job enqueued from SQL without one); claim_jobs returns it, so
-- the worker's spans continue the enqueuer's trace. Adding a nullable column without a default
-- rewrites nothing.
--
-- enqueue, enqueue_many and enqueue_json gain a last parameter p_trace_context jsonb default null:
-- every existing call (positional or named) means what it meant. A defaulted parameter is a new
-- signature, so the old functions are dropped and created again (a second overload would make the
-- old calls ambiguous), and claim_jobs is dropped and created again for its new result column.
-- Nothing in the database depends on them (plpgsql and sql bodies are not tracked); the grants a
-- user gave on them to roles of their own are copied over to the new functions.

alter table {{ s }}.jobs add column trace_context jsonb;
alter table {{ s }}.jobs add constraint jobs_trace_context_object
    check (trace_context is null or pg_catalog.jsonb_typeof(trace_context) = 'object');

create temporary table jobkit_0004_grants on commit drop as
select p.proname::text as name, r.rolname::text as grantee, a.is_grantable
from pg_catalog.pg_proc p
cross join lateral pg_catalog.aclexplode(p.proacl) a
join pg_catalog.pg_roles r on r.oid = a.grantee
where p.pronamespace = {{ schema | literal }}::pg_catalog.regnamespace
  and p.proname in ('enqueue', 'enqueue_many', 'enqueue_json', 'claim_jobs')
  and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner;

drop function {{ s }}.enqueue(text, jsonb, int, timestamptz, int, text);
drop function {{ s }}.enqueue_many(text[], jsonb[], int[], timestamptz[], int[], text[]);
drop function {{ s }}.enqueue_json(jsonb, jsonb, int[], timestamptz[], int[], text[]);
drop function {{ s }}.claim_jobs(text, int, text, interval, text, int);

-- Enqueue one job. With an idempotency key, an unfinished job of the same type and key is returned
-- instead of a new one. p_max_attempts null: decided when it runs (the handler's, else the type's).
-- p_trace_context: the enqueuer's W3C trace context (an object such as {"traceparent": "00-..."}),
-- handed to the worker with the claim so that its spans continue the enqueuer's trace.
create function {{ s }}.enqueue(
    p_type text,
    p_payload jsonb,
    p_priority int default 0,
    p_run_at timestamptz default now(),
    p_max_attempts int default null,
    p_idempotency_key text default null,
    p_trace_context jsonb default null
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
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, trace_context)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_trace_context)
        returning id into v_id;
        return v_id;
    end if;
    loop
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, idempotency_key,
                                  trace_context)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_idempotency_key, p_trace_context)
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
-- p_trace_context (one object, not an array): the enqueuer's trace context, stored on every new job.
create function {{ s }}.enqueue_many(
    p_type text[],
    p_payload jsonb[],
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null,
    p_trace_context jsonb default null
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
               p_idempotency_key[u.ord] as key
        from unnest(p_type, p_payload) with ordinality as u(type, payload, ord)
    ), inserted as (
        insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, idempotency_key,
                                  trace_context)
        select i.new_id, i.type, i.payload, i.priority, i.run_at, i.max_attempts, i.key, p_trace_context
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
                                        p_max_attempts[k], p_idempotency_key[k], p_trace_context);
        end if;
    end loop;
    return query select u.ord, u.id from unnest(v_ids) with ordinality as u(id, ord);
end
$$;

-- Bulk enqueue as the Python client sends it: types and payloads as JSON documents (types: an array,
-- or one string for all), the other columns as arrays (null = defaults). Without idempotency keys
-- the rows are inserted straight from the documents (no jsonb[] built in between); with keys it is
-- enqueue_many. Returns the ids in input order. p_trace_context: as enqueue_many's.
create function {{ s }}.enqueue_json(
    p_types jsonb,
    p_payloads jsonb,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null,
    p_trace_context jsonb default null
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
            p_priority, p_run_at, p_max_attempts, p_idempotency_key, p_trace_context) e
        order by e.ord;
        return;
    end if;
    -- Ids are drawn first, so they come back in input order whatever order the insert runs in.
    v_ids := array(select gen_random_uuid() from generate_series(1, jsonb_array_length(p_payloads)));
    v_one := case when jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, trace_context)
    select v_ids[e.n], coalesce(v_one, p_types ->> (e.n - 1)::int), e.v, coalesce(p_priority[e.n], 0),
           coalesce(p_run_at[e.n], now()), p_max_attempts[e.n], p_trace_context
    from jsonb_array_elements(p_payloads) with ordinality as e(v, n);
    return query select u.id from unnest(v_ids) as u(id);
end
$$;

-- Claim up to p_limit due jobs of one type for p_worker, for p_lease (at least 5 seconds), never more
-- than the rate limit's tokens allow (p_rate_key, else the type's rate_limit; unused tokens are given
-- back). p_max_attempts is the claiming handler's own max_attempts (null: none). Returns what a
-- handler needs, in priority order; max_attempts is the number of this round's last attempt
-- (round_start + the attempt limit), so attempts = max_attempts means "the last try"; trace_context
-- is the enqueuer's (0004). The ids go through an array so that the update probes the primary key
-- whatever the planner guesses.
create function {{ s }}.claim_jobs(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null,
    p_max_attempts int default null
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text, trace_context jsonb)
language plpgsql volatile set search_path = '' as $$
#variable_conflict use_column
declare
    v_key text;
    v_type_max int;
    v_limit int := greatest(p_limit, 0);
    v_claimed int;
begin
    if p_lease is null or p_lease < interval '5 seconds' then
        raise exception 'jobkit.claim_jobs: p_lease must be at least 5 seconds' using errcode = '22023';
    end if;
    select t.rate_limit, t.max_attempts into v_key, v_type_max from {{ s }}.job_types t
    where t.type in (p_type, '*') order by t.type = '*' limit 1;
    v_key := coalesce(p_rate_key, v_key);
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
            lease_expires_at = now() + p_lease, worker_id = p_worker,
            handler_max_attempts = p_max_attempts, updated_at = now()
        where j.id = any (array(
            select c.id from {{ s }}.jobs c
            where c.type = p_type and c.status = 'pending' and c.scheduled_for <= now()
            order by c.priority desc, c.scheduled_for
            limit v_limit
            for update skip locked
        ))
        returning j.id, j.type, j.attempts,
                  j.round_start + {{ s }}.attempt_limit(j.max_attempts, p_max_attempts, v_type_max) as cap,
                  j.priority, j.payload, j.idempotency_key, j.scheduled_for, j.trace_context
    )
    select c.id, c.type, c.attempts, c.cap, c.priority, c.payload, c.idempotency_key, c.trace_context
    from claimed c order by c.priority desc, c.scheduled_for;
    if v_key is not null then
        get diagnostics v_claimed = row_count;
        perform {{ s }}.return_tokens(v_key, v_limit - v_claimed);
    end if;
end
$$;

do $grants$
declare
    r record;
begin
    for r in select g.name, g.grantee, g.is_grantable from pg_temp.jobkit_0004_grants g loop
        execute pg_catalog.format('grant execute on function %I.%I to %I%s', {{ schema | literal }}, r.name,
                                  r.grantee, case when r.is_grantable then ' with grant option' else '' end);
    end loop;
end
$grants$;

revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
