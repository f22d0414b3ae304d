-- jobkit-functions: 6b30b68ed345cdc19663cf61bd6c4c49c91a0e07122767f532cd00f7f8c8764c
-- sql/functions/ as one Supabase CLI migration (`jobkit render --supabase`). `jobkit deploy` applies
-- those files statement by statement; a migration file is a plain script, so this one replaces what
-- a database already has wholesale: the EXECUTE grants other roles hold are kept, every function
-- of jobkit's schema (not of an extension, nor a declared row trigger's rowtrigger_*, which the
-- triggers file manages) is dropped with what depends on it (jobkit's triggers), and everything is
-- created again, then the grants are given back.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
-- The EXECUTE privileges on jobkit's functions that roles other than the owner hold, by function
-- name, kept for this transaction: a function dropped and created anew (a changed signature) gets
-- them back (function_grants_restore).
create temporary table pg_temp.jobkit_function_grants on commit drop as
select distinct p.proname::pg_catalog.text as name, r.rolname::pg_catalog.text as grantee,
       a.is_grantable as grantable
from pg_catalog.pg_proc p
cross join lateral pg_catalog.aclexplode(p.proacl) a
join pg_catalog.pg_roles r on r.oid operator(pg_catalog.=) a.grantee
where p.pronamespace operator(pg_catalog.=) 'jobkit'::pg_catalog.regnamespace
  and a.privilege_type operator(pg_catalog.=) 'EXECUTE' and a.grantee operator(pg_catalog.<>) p.proowner;
do $replace$
declare
    r record;
begin
    for r in select p.oid::pg_catalog.regprocedure as f from pg_catalog.pg_proc p
             where p.pronamespace operator(pg_catalog.=) 'jobkit'::pg_catalog.regnamespace
               -- the declared row triggers' functions are not the files' (their triggers would go too)
               and not (p.proname::pg_catalog.text operator(pg_catalog.~~) 'rowtrigger\_%')
               and not exists (select 1 from pg_catalog.pg_depend d
                               where d.classid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                                 and d.objid operator(pg_catalog.=) p.oid
                                 and d.deptype operator(pg_catalog.=) 'e') loop
        execute pg_catalog.format('drop function if exists %s cascade', r.f);
    end loop;
end
$replace$;
drop view if exists "jobkit".job_history;

-- The public API: per-type policy
-- sql/functions/10_policy.sql: type settings, attempt limits, backoff, and the concurrency key templates of fair types.
-- Applied in file-name order (first, before 20_enqueue.sql); sql/functions/README.md says how deploy applies these files.

-- The settings of one type: its own row, else the defaults row.
create or replace function "jobkit".type_settings(p_type text) returns "jobkit".job_types
language plpgsql stable set search_path = '' as $$
declare
    v_row "jobkit".job_types;
begin
    -- plpgsql, not sql: its plan is cached per session (a sql function is planned on every call).
    select t.* into v_row from "jobkit".job_types t
    where t.type in (p_type, '*')
    order by t.type = '*'
    limit 1;
    return v_row;
end
$$;

-- 0012: a worker records the types it serves when it starts (one statement per start).
create or replace function "jobkit".record_types(p_types text[]) returns void
language sql volatile set search_path = '' as $$
    insert into "jobkit".known_types as k (type)
    select distinct t.type from pg_catalog.unnest(p_types) as t(type) where t.type is not null
    order by 1
    on conflict (type) do update set seen_at = pg_catalog.now()
$$;

-- The attempt limit of a job (see the header): its own, its last handler's, its type's (p_type_max).
create or replace function "jobkit".attempt_limit(p_job_max int, p_handler_max int, p_type_max int) returns int
language sql immutable set search_path = '' as $$
    select coalesce(p_job_max, p_handler_max, p_type_max, 3)
$$;

-- Retry delay for an attempt that just failed: base * factor^(attempt-1), capped, ± jitter, >= 1 s.
create or replace function "jobkit".backoff(p_type text, p_attempt int) returns interval
language sql volatile set search_path = '' as $$
    select make_interval(secs => greatest(1.0,
        least(extract(epoch from c.backoff_cap)::float8,
              extract(epoch from c.backoff_base)::float8
                * power(c.backoff_factor, least(greatest(p_attempt, 1) - 1, 100)))
        * (1 + c.backoff_jitter * (2 * random() - 1))))
    from "jobkit".type_settings(p_type) c
$$;

-- A key rendered from a type's template: strings are copied, arrays are paths into the payload
-- (a missing field renders as the empty string), {"ref": "owner"} is the job's owner (0011; the
-- two-argument form, for jobs without one, renders it as '').
create or replace function "jobkit"._render_key(p_template jsonb, p_payload jsonb) returns text
language sql immutable set search_path = '' as $$
    select pg_catalog.string_agg(
               case pg_catalog.jsonb_typeof(e.part)
                   when 'string' then e.part #>> '{}'
                   when 'array' then coalesce(p_payload #>> array(select pg_catalog.jsonb_array_elements_text(e.part)), '')
                   else ''
               end, '' order by e.n)
    from pg_catalog.jsonb_array_elements(p_template) with ordinality as e(part, n)
$$;

create or replace function "jobkit"._render_key(p_template jsonb, p_payload jsonb, p_owner text) returns text
language sql immutable set search_path = '' as $$
    select pg_catalog.string_agg(
               case pg_catalog.jsonb_typeof(e.part)
                   when 'string' then e.part #>> '{}'
                   when 'array' then coalesce(p_payload #>> array(select pg_catalog.jsonb_array_elements_text(e.part)), '')
                   else coalesce(p_owner, '')
               end, '' order by e.n)
    from pg_catalog.jsonb_array_elements(p_template) with ordinality as e(part, n)
$$;

-- A new job's concurrency key: the given one, else the type's template, else '' for a fair type.
create or replace function "jobkit"._job_key(p_type text, p_payload jsonb, p_key text) returns text
language plpgsql stable set search_path = '' as $$
declare
    v_fair boolean;
    v_template jsonb;
begin
    if p_key is not null then
        return p_key;
    end if;
    select t.fair, t.key_template into v_fair, v_template from "jobkit".job_types t where t.type = p_type;
    if v_template is not null then
        return "jobkit"._render_key(v_template, p_payload);
    end if;
    return case when v_fair then '' end;
end
$$;

-- A type that becomes fair gives its unfinished jobs their keys (fair claims see only keyed jobs),
-- owned jobs with their owner.
create or replace function "jobkit".job_types_key_backfill() returns trigger
language plpgsql set search_path = '' as $$
begin
    if new.fair and (tg_op = 'INSERT' or not old.fair) then
        update "jobkit".jobs j
        set concurrency_key = coalesce("jobkit"._render_key(new.key_template, j.payload, j.owner), ''),
            updated_at = now()
        where j.type = new.type and j.status in ('pending', 'processing') and j.concurrency_key is null;
    end if;
    return null;
end
$$;

create or replace trigger job_types_key_backfill after insert or update of fair on "jobkit".job_types
    for each row execute function "jobkit".job_types_key_backfill();

-- The public API: enqueue
-- sql/functions/20_enqueue.sql: enqueue, enqueue_many, enqueue_json, and the debounce/throttle windows.
-- Applied in file-name order (after 10_policy.sql, before 30_claim.sql); sql/functions/README.md says how deploy applies these files.

-- Enqueue one job. With an idempotency key, an unfinished job of the same type and key is returned
-- instead of a new one. p_max_attempts null: decided when it runs (the handler's, else the type's).
-- p_trace_context: the enqueuer's W3C trace context (an object such as {"traceparent": "00-..."}),
-- handed to the worker with the claim so that its spans continue the enqueuer's trace.
-- p_concurrency_key null: the type's key template, else '' for a fair type, else none. p_debounce /
-- p_throttle: see _enqueue_windowed.
create or replace function "jobkit".enqueue(
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
        insert into "jobkit".jobs (type, payload, priority, scheduled_for, max_attempts, trace_context,
                                  concurrency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_trace_context,
                coalesce(p_concurrency_key,
                         (select case when t.key_template is not null
                                      then "jobkit"._render_key(t.key_template, p_payload) else '' end
                          from "jobkit".job_types t where t.type = p_type and t.fair)))
        returning id into v_id;
        return v_id;
    end if;
    v_key := p_concurrency_key;
    if v_key is null then
        select case when t.key_template is not null then "jobkit"._render_key(t.key_template, p_payload)
                    else '' end
        into v_key from "jobkit".job_types t where t.type = p_type and t.fair;
    end if;
    if p_debounce is not null or p_throttle is not null then
        return "jobkit"._enqueue_windowed(p_type, p_payload, p_priority, p_run_at, p_max_attempts,
                                        p_idempotency_key, v_key, p_debounce, p_throttle,
                                        p_trace_context);
    end if;
    loop
        insert into "jobkit".jobs (type, payload, priority, scheduled_for, max_attempts, idempotency_key,
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
        select j.id into v_id from "jobkit".jobs j
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
create or replace function "jobkit"._enqueue_windowed(
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
        insert into "jobkit".enqueue_windows as w (type, kind, key, job_id, until)
        values (p_type, 'throttle', p_key, v_new, now() + p_throttle)
        on conflict (type, kind, key) do update set job_id = excluded.job_id, until = excluded.until
            where w.until <= now()
        returning w.job_id into v_id;
        if v_id is null then
            select w.job_id into v_id from "jobkit".enqueue_windows w
            where w.type = p_type and w.kind = 'throttle' and w.key = p_key;
            return v_id;
        end if;
        insert into "jobkit".jobs (id, type, payload, priority, scheduled_for, max_attempts, concurrency_key,
                                  trace_context)
        values (v_new, p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts, p_key,
                p_trace_context);
        return v_new;
    end if;
    -- Debounce: lock the key's row (created on first use), then move its pending job or add one.
    insert into "jobkit".enqueue_windows as w (type, kind, key) values (p_type, 'debounce', p_key)
    on conflict (type, kind, key) do update set kind = excluded.kind
    returning w.job_id into v_id;
    if v_id is not null then
        update "jobkit".jobs j
        set payload = p_payload, scheduled_for = now() + p_debounce, priority = coalesce(p_priority, 0),
            max_attempts = p_max_attempts, trace_context = p_trace_context, updated_at = now()
        where j.id = v_id and j.status = 'pending';
        if found then
            update "jobkit".enqueue_windows w set until = now() + p_debounce
            where w.type = p_type and w.kind = 'debounce' and w.key = p_key;
            return v_id;
        end if;
    end if;
    insert into "jobkit".jobs (id, type, payload, priority, scheduled_for, max_attempts, concurrency_key,
                              trace_context)
    values (v_new, p_type, p_payload, coalesce(p_priority, 0), now() + p_debounce, p_max_attempts, p_key,
            p_trace_context);
    update "jobkit".enqueue_windows w set job_id = v_new, until = now() + p_debounce
    where w.type = p_type and w.kind = 'debounce' and w.key = p_key;
    return v_new;
end
$$;

-- Enqueue many jobs in one statement. Arrays are parallel (null arrays or elements = defaults); ids
-- come back with their 1-based position in the input; a repeated idempotency key gets the id of the
-- unfinished job that holds it, whether that job is older or earlier in the same batch.
-- p_trace_context (one object, not an array): the enqueuer's trace context, stored on every new job.
create or replace function "jobkit".enqueue_many(
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
                        case when t.key_template is not null then "jobkit"._render_key(t.key_template, u.payload) end,
                        case when t.fair then '' end) as concurrency_key
        from unnest(p_type, p_payload) with ordinality as u(type, payload, ord)
        left join "jobkit".job_types t on t.type = u.type
    ), inserted as (
        insert into "jobkit".jobs (id, type, payload, priority, scheduled_for, max_attempts, idempotency_key,
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
        select j.id from "jobkit".jobs j
        where i.key is not null and j.type = i.type and j.idempotency_key = i.key
          and j.status in ('pending', 'processing')
    ) e on true;
    -- A key held by a transaction that committed after this statement's snapshot: resolve it anew.
    for k in 1 .. coalesce(cardinality(v_ids), 0) loop
        if v_ids[k] is null then
            v_ids[k] := "jobkit".enqueue(p_type[k], p_payload[k], p_priority[k], p_run_at[k],
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
create or replace function "jobkit".enqueue_json(
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
       or exists (select 1 from "jobkit".job_types t where t.fair and p_types ? t.type) then
        return query select e.id from "jobkit".enqueue_many(
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
    insert into "jobkit".jobs (id, type, payload, priority, scheduled_for, max_attempts, trace_context)
    select v_ids[e.n], coalesce(v_one, p_types ->> (e.n - 1)::int), e.v, coalesce(p_priority[e.n], 0),
           coalesce(p_run_at[e.n], now()), p_max_attempts[e.n], p_trace_context
    from jsonb_array_elements(p_payloads) with ordinality as e(v, n);
    return query select u.id from unnest(v_ids) as u(id);
end
$$;

-- The public API: claim (the worker's lifecycle)
-- sql/functions/30_claim.sql: claim_jobs, the fair claim of types with concurrency limits, and the seed's pick_jobs.
-- Applied in file-name order (after 20_enqueue.sql, before 40_finish.sql); sql/functions/README.md says how deploy applies these files.

-- Claim up to p_limit due jobs of one type for p_worker, for p_lease (at least 5 seconds), never more
-- than the rate limit's tokens allow (p_rate_key, else the type's rate_limit; unused tokens are given
-- back). p_max_attempts is the claiming handler's own max_attempts (null: none). Returns what a
-- handler needs, in priority order; max_attempts is the number of this round's last attempt
-- (round_start + the attempt limit), so attempts = max_attempts means "the last try"; trace_context
-- is the enqueuer's. The ids go through an array so that the update probes the primary key
-- whatever the planner guesses. Nothing of a paused type; a paused key's jobs are skipped. A fair
-- type (job_types.fair) claims through _claim_fair: per-key and per-type running limits, keys
-- served round-robin. Its statements keep one generic plan (plan_cache_mode; issue 23, stop 33):
-- the plan cache costed the generic plan higher (its LIMIT unknown) and planned the update afresh
-- on every claim, against the ten indexes and twelve CHECKs of jobs (a claim of 100: ~6,500 server
-- instructions a job single-user, ~20,000 over the wire); the generic plan is the same index walk.
-- _wake_due and _claim_fair, called from here, choose their own (the setting would reach them).
create or replace function "jobkit".claim_jobs(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null,
    p_max_attempts int default null
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text, trace_context jsonb)
language plpgsql volatile set search_path = '' set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
    v_key text;
    v_type_max int;
    v_fair boolean;
    v_per_key int;
    v_max_running int;
    v_paused text[];
    v_limit int := greatest(p_limit, 0);
    v_claimed int;
    v_triggers boolean;  -- any declared row triggers (72_row_inbox.sql)
begin
    if p_lease is null or p_lease < interval '5 seconds' then
        raise exception 'jobkit.claim_jobs: p_lease must be at least 5 seconds' using errcode = '22023';
    end if;
    select t.rate_limit, t.max_attempts, t.fair, t.max_running_per_key, t.max_running,
           array(select p.key from "jobkit".pauses p where p.type = p_type),
           exists (select 1 from "jobkit".row_triggers)  -- no p_type here: it cost 1.3 k Ir a job (drain)
    into v_key, v_type_max, v_fair, v_per_key, v_max_running, v_paused, v_triggers
    from "jobkit".job_types t
    where t.type in (p_type, '*') order by t.type = '*' limit 1;
    if array_position(v_paused, null) is not null then
        return;  -- the type is paused
    end if;
    if v_triggers then  -- what the type's row triggers staged becomes jobs first (72_row_inbox.sql)
        if exists (select 1 from "jobkit".row_triggers r where r.spec ->> 'type' = p_type) then
            perform "jobkit".move_row_inbox(p_type, 10000);
        end if;
    end if;
    -- Waiting jobs of the type whose sleep ended or whose wait timed out become pending here, so
    -- that the wake-up at their due time claims them (47_waits.sql). No wait: one empty index probe.
    if exists (select 1 from "jobkit".job_waits w where w.type = p_type and w.due <= now()) then
        perform "jobkit"._wake_due(p_type, greatest(v_limit, 1), false);
    end if;
    v_key := coalesce(p_rate_key, v_key);
    if v_fair then
        return query select * from "jobkit"._claim_fair(p_type, v_limit, p_worker, p_lease, v_key,
                                                      p_max_attempts, v_type_max, v_per_key,
                                                      v_max_running, v_paused);
        return;
    end if;
    if v_key is not null then
        -- Take tokens only for jobs that exist: count the due ones first (cheap, bounded by p_limit).
        select count(*) into v_claimed from (
            select 1 from "jobkit".jobs j
            where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit v_limit
        ) due;
        v_limit := "jobkit".take_tokens(v_key, v_claimed);
        if v_limit = 0 then
            return;
        end if;
    end if;
    return query
    with claimed as (
        update "jobkit".jobs j
        set status = 'processing', attempts = j.attempts + 1, started_at = now(),
            lease_expires_at = now() + p_lease, worker_id = p_worker,
            handler_max_attempts = p_max_attempts, updated_at = now()
        where j.id = any (array(
            select c.id from "jobkit".jobs c
            where c.type = p_type and c.status = 'pending' and c.scheduled_for <= now()
              and (cardinality(v_paused) = 0 or c.concurrency_key is null or c.concurrency_key <> all (v_paused))
            order by c.priority desc, c.scheduled_for
            limit v_limit
            for update skip locked
        ))
        returning j.id, j.type, j.attempts,
                  j.round_start + coalesce(j.max_attempts, p_max_attempts, v_type_max, 3) as cap,  -- attempt_limit, inlined
                  j.priority, j.payload, j.idempotency_key, j.scheduled_for, j.trace_context
    )
    select c.id, c.type, c.attempts, c.cap, c.priority, c.payload, c.idempotency_key, c.trace_context
    from claimed c order by c.priority desc, c.scheduled_for;
    if v_key is not null then
        get diagnostics v_claimed = row_count;
        perform "jobkit".return_tokens(v_key, v_limit - v_claimed);
    end if;
end
$$;

-- The claim of a fair type (see claim_jobs). One claimer of the type at a time: every job of the
-- type enters processing under this transaction-level advisory lock, and in READ COMMITTED each
-- statement after it sees every earlier claim, so the running counts it reads are exact and the
-- limits hold across workers. Completions, failures, sweeps and cancels only lower the counts and
-- take no lock. Keys are served round-robin: from the key after the type's cursor (the last key
-- the previous claim served), each key with due jobs and room gets its first job, then its second,
-- ...; a job without a key of its own is in the key ''. One index probe per key finds the key and
-- its first jobs in claim order (as many as the batch needs per key, from how many keys the
-- previous claim found, key_cursors.keys): a claim walks each key once. Its statements keep
-- one generic plan (plan_cache_mode): planning the walk afresh took as long as running it; and
-- no JIT: the walk's estimated cost crossed jit_above_cost, and compiling it took 50-100 ms a claim.
create or replace function "jobkit"._claim_fair(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text, p_max_attempts int,
    p_type_max int, p_per_key int, p_max_running int, p_paused text[]
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text, trace_context jsonb)
language plpgsql volatile set search_path = '' set plan_cache_mode = force_generic_plan set jit = off
as $$
#variable_conflict use_column
declare
    v_limit int := p_limit;
    v_want int;
    v_cursor text;
    v_seen int;  -- keys with due jobs the previous claim found (null: unknown)
    v_take int;  -- jobs per key a probe fetches in this pass
    v_found int;
    v_full boolean;
    v_ids uuid[];
    v_last text;
    v_total int := 0;
    v_got int;
    v_tokens int;
begin
    if current_setting('transaction_isolation') <> 'read committed' then
        raise exception 'jobkit.claim_jobs: job type % has concurrency limits: claim it in a READ COMMITTED transaction', p_type
            using errcode = '25000';
    end if;
    perform pg_advisory_xact_lock(hashtextextended('jobkit' || '.claim:' || p_type, 0));
    if p_max_running is not null then
        select least(v_limit, p_max_running - count(*)::int) into v_limit from "jobkit".jobs r
        where r.type = p_type and r.status = 'processing' and r.concurrency_key is not null;
    end if;
    if v_limit <= 0 then
        return;
    end if;
    if p_rate_key is not null then
        select count(*) into v_tokens from (
            select 1 from "jobkit".jobs j
            where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit v_limit
        ) due;
        v_limit := "jobkit".take_tokens(p_rate_key, v_tokens);
        v_tokens := v_limit;
        if v_limit = 0 then
            return;
        end if;
    end if;
    select c.last_key, c.keys into v_cursor, v_seen from "jobkit".key_cursors c where c.type = p_type;
    for v_pass in 1 .. 4 loop
        v_want := v_limit - v_total;
        exit when v_want <= 0;
        v_take := least(v_want, ceil(v_want::numeric / greatest(coalesce(v_seen, v_want), 1))::int);
        -- The keys with a due job and room, in turn from the cursor (at most v_want of them), each
        -- with up to v_take of its due jobs in claim order: one probe of jobs_key_claim_idx per key
        -- (a second one only for a key whose first jobs are all scheduled later).
        with recursive after_cursor(key, ids, n) as (
            (select h.key, h.ids, 1 from (select r.key, array_agg(r.id order by r.o) filter (where r.at <= now()) as ids
                 from (select j.concurrency_key as key, j.id, j.scheduled_for as at,
                              row_number() over v as o, first_value(j.concurrency_key) over v as k1
                       from "jobkit".jobs j
                       where j.type = p_type and j.status = 'pending' and j.concurrency_key > v_cursor
                       window v as (order by j.concurrency_key, j.priority desc, j.scheduled_for
                                    rows unbounded preceding)
                       order by j.concurrency_key, j.priority desc, j.scheduled_for
                       limit v_take) r
                 where r.key = r.k1
                 group by r.key) h)
            union all
            select h.key, h.ids, a.n + 1
            from after_cursor a cross join lateral (select r.key, array_agg(r.id order by r.o) filter (where r.at <= now()) as ids
                 from (select j.concurrency_key as key, j.id, j.scheduled_for as at,
                              row_number() over v as o, first_value(j.concurrency_key) over v as k1
                       from "jobkit".jobs j
                       where j.type = p_type and j.status = 'pending' and j.concurrency_key > a.key
                       window v as (order by j.concurrency_key, j.priority desc, j.scheduled_for
                                    rows unbounded preceding)
                       order by j.concurrency_key, j.priority desc, j.scheduled_for
                       limit v_take) r
                 where r.key = r.k1
                 group by r.key) h
        ), up_to_cursor(key, ids, n) as (
            (select h.key, h.ids, 1000000000 from (select r.key, array_agg(r.id order by r.o) filter (where r.at <= now()) as ids
                 from (select j.concurrency_key as key, j.id, j.scheduled_for as at,
                              row_number() over v as o, first_value(j.concurrency_key) over v as k1
                       from "jobkit".jobs j
                       where j.type = p_type and j.status = 'pending' and j.concurrency_key is not null
                       window v as (order by j.concurrency_key, j.priority desc, j.scheduled_for
                                    rows unbounded preceding)
                       order by j.concurrency_key, j.priority desc, j.scheduled_for
                       limit v_take) r
                 where r.key = r.k1
                 group by r.key) h)
            union all
            select h.key, h.ids, u.n + 1
            from up_to_cursor u cross join lateral (select r.key, array_agg(r.id order by r.o) filter (where r.at <= now()) as ids
                 from (select j.concurrency_key as key, j.id, j.scheduled_for as at,
                              row_number() over v as o, first_value(j.concurrency_key) over v as k1
                       from "jobkit".jobs j
                       where j.type = p_type and j.status = 'pending' and j.concurrency_key > u.key
                       window v as (order by j.concurrency_key, j.priority desc, j.scheduled_for
                                    rows unbounded preceding)
                       order by j.concurrency_key, j.priority desc, j.scheduled_for
                       limit v_take) r
                 where r.key = r.k1
                 group by r.key) h
            where v_cursor is null or u.key < v_cursor
        ), walk as (
            select a.key, a.ids, a.n from after_cursor a
            union all
            select u.key, u.ids, u.n from up_to_cursor u where v_cursor is null or u.key <= v_cursor
        ), open as (
            select w.key, w.n,
                   (coalesce(w.ids, array(  -- only later jobs first: its due ones of lower priority
                        select d.id from "jobkit".jobs d
                        where d.type = p_type and d.concurrency_key = w.key and d.status = 'pending'
                          and d.scheduled_for <= now()
                        order by d.priority desc, d.scheduled_for limit v_take)))[1:r.room] as ids
            from walk w
            cross join lateral (
                select case when p_per_key is null then v_take
                            else least(v_take, p_per_key - (select count(*)::int from "jobkit".jobs x
                                                             where x.type = p_type and x.concurrency_key = w.key
                                                               and x.status = 'processing')) end as room
            ) r
            where r.room > 0 and w.key <> all (p_paused)
        ), picked as (
            select o.key, o.n, o.ids from open o where cardinality(o.ids) > 0 limit v_want
        ), turns as (  -- round robin: every key's first job, then every key's second, ...
            select p.key, p.n, t.id, t.rank
            from picked p cross join lateral unnest(p.ids) with ordinality as t(id, rank)
            order by t.rank, p.n
            limit v_want
        )
        select (select array_agg(t.id order by t.rank, t.n) from turns t),
               (select t.key from turns t order by t.rank desc, t.n desc limit 1),
               (select count(*)::int from picked),
               (select coalesce(bool_or(cardinality(p.ids) >= v_take), false) from picked p)
        into v_ids, v_last, v_found, v_full;
        exit when v_ids is null;
        v_seen := v_found;  -- the next pass, and the next claim, share the work among these keys
        return query
        with claimed as (
            update "jobkit".jobs j
            set status = 'processing', attempts = j.attempts + 1, started_at = now(),
                lease_expires_at = now() + p_lease, worker_id = p_worker,
                handler_max_attempts = p_max_attempts, updated_at = now()
            where j.id = any (v_ids) and j.status = 'pending' and j.scheduled_for <= now()
            returning j.id, j.type, j.attempts,
                      j.round_start + coalesce(j.max_attempts, p_max_attempts, p_type_max, 3) as cap,  -- attempt_limit, inlined
                      j.priority, j.payload, j.idempotency_key, j.trace_context
        )
        select c.id, c.type, c.attempts, c.cap, c.priority, c.payload, c.idempotency_key, c.trace_context
        from claimed c join unnest(v_ids) with ordinality as u(id, turn) on u.id = c.id order by u.turn;
        get diagnostics v_got = row_count;
        v_total := v_total + v_got;
        v_cursor := v_last;
        -- Every key found gave all the due jobs it had room for, and no key was left unwalked.
        exit when not v_full and v_found < v_want;
    end loop;
    if v_cursor is not null then
        insert into "jobkit".key_cursors as c (type, last_key, keys) values (p_type, v_cursor, v_seen)
        on conflict (type) do update set last_key = excluded.last_key, keys = excluded.keys,
                                         updated_at = now();
    end if;
    if p_rate_key is not null then
        perform "jobkit".return_tokens(p_rate_key, v_tokens - v_total);
    end if;
end
$$;

-- The seed's signature, over claim_jobs: whole rows, as claimed.
create or replace function "jobkit".pick_jobs(p_type text, p_limit int, p_worker text, p_lease interval)
returns setof "jobkit".jobs
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    v_ids := array(select c.id from "jobkit".claim_jobs(p_type, p_limit, p_worker, p_lease) c);
    return query select j.* from "jobkit".jobs j where j.id = any (v_ids)
                 order by j.priority desc, j.scheduled_for;
end
$$;

-- The seed's one-job form: pick_jobs for one job under the type's configured lease.
create or replace function "jobkit".pick_job(p_type text) returns setof "jobkit".jobs
language sql volatile set search_path = '' as $$
    select * from "jobkit".pick_jobs(p_type, 1, 'pick_job', ("jobkit".type_settings(p_type)).lease)
$$;

-- The public API: finish an attempt (the worker's lifecycle)
-- sql/functions/40_finish.sql: the fenced completions, failures, snoozes, lease extensions, releases, heartbeats and progress.
-- Applied in file-name order (after 30_claim.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.

-- Complete many (id, attempt) pairs in one fenced statement. p_results null = every result null
-- (handlers that return nothing: nothing to decode, nothing to look up). Waiters are notified, and
-- the children of jobs of a graph are told (_settle_children, 48_flows.sql); a plain job pays one
-- null in an aggregate for that.
create or replace function "jobkit".complete_jobs(p_ids uuid[], p_attempts int[], p_results jsonb[])
returns setof uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_done uuid[];
    v_parents uuid[];
begin
    with done as (
        update "jobkit".jobs j
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
        perform "jobkit"._notify_done(v_done);
    end if;
    if v_parents is not null then  -- jobs of a graph (0020): their children may be due now
        perform "jobkit"._settle_children(v_parents);
    end if;
    return query select unnest(v_done);
end
$$;

-- One fenced completion: true when the attempt still held the job.
create or replace function "jobkit".complete_job(p_id uuid, p_attempt int, p_result jsonb) returns boolean
language sql volatile set search_path = '' as $$
    select exists (select 1 from "jobkit".complete_jobs(array[p_id], array[p_attempt], array[p_result]))
$$;

-- Record failed attempts. Each job goes back to pending after p_retry_in (default: the type's
-- backoff, never less than 1 s) while its round has attempts left and the failure is not
-- permanent, else to failed (and waiters are notified). Returns (id, new status) for the jobs the
-- attempt still held (fenced).
create or replace function "jobkit".fail_jobs(
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
        select i.*, i.may_retry and j.attempts - j.round_start < "jobkit".attempt_limit(
                   j.max_attempts, j.handler_max_attempts, coalesce(t.max_attempts, d.max_attempts)) as again
        from input i
        join "jobkit".jobs j on j.id = i.id
        cross join (select x.max_attempts from "jobkit".job_types x where x.type = '*') d
        left join "jobkit".job_types t on t.type = j.type
    ), changed as (
        update "jobkit".jobs j
        set status = case when i.again then 'pending' else 'failed' end,
            scheduled_for = case when i.again
                then now() + greatest(coalesce(i.retry_in, "jobkit".backoff(j.type, j.attempts - j.round_start)),
                                      interval '1 second')
                else j.scheduled_for end,
            completed_at = case when i.again then null else now() end,
            last_error = i.error, lease_expires_at = null, updated_at = now()
        from decided i
        where j.id = any (p_ids) and j.id = i.id and j.status = 'processing' and j.attempts = i.attempt
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error, j.flow_id
    ), history as (
        insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at,
               case when c.status = 'pending' then 'retry' else 'failed' end, c.last_error
        from changed c
    )
    select array_agg(c.id), array_agg(c.status),
           array_agg(c.id) filter (where c.flow_id is not null and c.status = 'failed')
    into v_ids, v_statuses, v_parents from changed c;
    if 'failed' = any (v_statuses) then
        perform "jobkit"._notify_done(array(
            select u.id from unnest(v_ids, v_statuses) as u(id, status) where u.status = 'failed'));
    end if;
    if v_parents is not null then  -- failed jobs of a graph: their children's policies apply
        perform "jobkit"._settle_children(v_parents);
    end if;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- One fenced failure: the new status (pending = a retry is scheduled, failed), null when fenced out.
create or replace function "jobkit".fail_job(
    p_id uuid, p_attempt int, p_error text,
    p_retry_in interval default null, p_permanent boolean default false
) returns text
language sql volatile set search_path = '' as $$
    select f.status from "jobkit".fail_jobs(array[p_id], array[p_attempt], array[p_error],
                                           array[p_retry_in], array[p_permanent]) f
$$;

-- Put a claimed job back to pending at now() + p_delay without consuming its attempt (rate limits,
-- 429 Retry-After, a worker shutting down). Fenced like complete_job.
create or replace function "jobkit".snooze_job(p_id uuid, p_attempt int, p_delay interval) returns boolean
language sql volatile set search_path = '' as $$
    with changed as (
        update "jobkit".jobs j
        set status = 'pending', attempts = j.attempts - 1,
            scheduled_for = now() + greatest(coalesce(p_delay, interval '0'), interval '0'),
            lease_expires_at = null, updated_at = now()
        where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
        returning j.id, j.worker_id, j.started_at
    ), history as (
        insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, p_attempt, c.worker_id, c.started_at, 'snoozed' from changed c
    )
    select exists (select 1 from changed)
$$;

-- Heartbeat: push the lease of a running attempt to at least now() + p_by. Returns the new deadline,
-- or null when the attempt no longer holds the job (stop working on it).
create or replace function "jobkit".extend_lease(p_id uuid, p_attempt int, p_by interval) returns timestamptz
language sql volatile set search_path = '' as $$
    update "jobkit".jobs j
    set lease_expires_at = greatest(j.lease_expires_at, now() + p_by), updated_at = now()
    where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
    returning j.lease_expires_at
$$;

-- Heartbeat many running attempts at once; returns the ids whose lease was extended.
create or replace function "jobkit".extend_leases(p_ids uuid[], p_attempts int[], p_by interval) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    update "jobkit".jobs j
    set lease_expires_at = greatest(j.lease_expires_at, now() + p_by), updated_at = now()
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$;

-- Hand claimed jobs back (a worker shutting down): pending again now, attempt not consumed,
-- recorded as 'released' (0009; 'snoozed' before).
create or replace function "jobkit".release_jobs(p_ids uuid[], p_attempts int[]) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    with changed as (
        update "jobkit".jobs j
        set status = 'pending', attempts = j.attempts - 1, scheduled_for = now(),
            lease_expires_at = null, updated_at = now()
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = p_attempts[array_position(p_ids, j.id)]
        returning j.id, j.attempts + 1 as attempt, j.worker_id, j.started_at
    ), history as (
        insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempt, c.worker_id, c.started_at, 'released', 'released by a stopping worker'
        from changed c
    )
    select c.id from changed c;
    -- another worker takes them now, not at the next cron wake-up (never coalesced: wake())
    perform "jobkit".wake(r.type) from (
        select distinct j.type from "jobkit".jobs j where j.id = any (p_ids) and j.status = 'pending'
    ) r;
end
$$;

-- Of these running attempts, the ones that no longer hold their job, with the job's status now
-- (cancelled: cancel_job stopped it; gone: deleted). Workers ask once a second, on their heartbeat.
create or replace function "jobkit".running_check(p_ids uuid[], p_attempts int[]) returns table (id uuid, status text)
language sql stable set search_path = '' as $$
    select u.id, coalesce(j.status, 'gone')
    from unnest(p_ids, p_attempts) as u(id, attempt)
    left join "jobkit".jobs j on j.id = u.id
    where j.id is null or j.status <> 'processing' or j.attempts <> u.attempt
$$;

-- Store the progress handlers reported (ctx.progress) for running attempts: p_progress is a JSON
-- array of objects parallel to p_ids. Fenced like extend_leases; returns the ids it updated.
create or replace function "jobkit".set_progress(p_ids uuid[], p_attempts int[], p_progress jsonb) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    if pg_catalog.jsonb_typeof(p_progress) is distinct from 'array'
       or pg_catalog.jsonb_array_length(p_progress) <> coalesce(pg_catalog.cardinality(p_ids), 0) then
        raise exception 'jobkit.set_progress: p_progress must be a JSON array as long as p_ids'
            using errcode = '22023';
    end if;
    return query
    update "jobkit".jobs j
    set progress = p_progress -> (array_position(p_ids, j.id) - 1)
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$;

-- These jobs finished: resolve the jobs waits on them (ctx.wait_for_jobs), and tell waiters (jobkit.wait): one notification per 200 ids, only for the
-- ids someone registered with wait_on (0014), whose rows it deletes. Nobody waiting (no row at all):
-- one probe of an empty table, and no NOTIFY, whose commit-time lock serialises every committer.
create or replace function "jobkit"._notify_done(p_ids uuid[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_waited uuid[];
begin
    perform "jobkit"._jobs_finished(p_ids);  -- jobs waits (ctx.wait_for_jobs) on these: 47_waits.sql
    if not exists (select from "jobkit".waiters) then
        return;
    end if;
    with gone as (
        delete from "jobkit".waiters w where w.job_id operator(pg_catalog.=) any (p_ids) returning w.job_id
    )
    select pg_catalog.array_agg(g.job_id) into v_waited from gone g;
    perform pg_catalog.pg_notify('jobkit_done',
                                 pg_catalog.array_to_string(v_waited[i:i + 199], ','))
    from pg_catalog.generate_series(1, coalesce(pg_catalog.cardinality(v_waited), 0), 200) as i;
end
$$;

-- Register waiters (jobkit.wait, after it LISTENs on <schema>_done): the finishing statement of
-- each of these jobs sends the completion NOTIFY. p_for: how long the waiter waits at most; the row
-- then expires (prune deletes it). A job already finished is notified by no one: the waiter reads
-- its state after registering.
create or replace function "jobkit".wait_on(p_ids uuid[], p_for interval) returns void
language plpgsql volatile set search_path = '' as $$
begin
    if p_for is null or p_for operator(pg_catalog.<) interval '0' then
        raise exception 'jobkit.wait_on: p_for must be a non-negative interval (how long you wait)'
            using errcode = '22023';
    end if;
    insert into "jobkit".waiters as w (job_id, expires_at)
    select distinct u.id, pg_catalog.now() operator(pg_catalog.+) p_for
    from pg_catalog.unnest(p_ids) as u(id) where u.id is not null
    on conflict (job_id) do update set expires_at = greatest(w.expires_at, excluded.expires_at);
end
$$;

-- The public API: durable steps (ctx.step, issue 25)
-- sql/functions/45_steps.sql: jobs' completed steps read back on a retry, and steps' records written fenced by their attempts.
-- Applied in file-name order (after 40_finish.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.


-- The completed steps of these jobs: what a retry (or, later, a replay after a wait) returns
-- instead of running them again. Failed steps are not returned: they run again. The worker reads
-- the first steps of many jobs in one statement (group commit).
create or replace function "jobkit".load_steps(p_ids uuid[])
returns table (job_id uuid, name text, occurrence int, result jsonb)
language plpgsql stable set search_path = '' set plan_cache_mode = force_generic_plan as $$
begin
    -- plpgsql, so that its plan is kept (a SQL function with a pinned search_path is not inlined
    -- and planned its query on every call); one primary-key probe per job through a lateral
    -- subquery, so that the kept generic plan does not scan the table whatever its statistics
    -- said when it was made (sql/shared/steps.sql: the worker's load_steps query runs the same text).
    return query
    select t.job_id, t.name, t.occurrence, t.result
    from (select distinct u.id from pg_catalog.unnest(p_ids) as u(id)) p
    cross join lateral (
        select s.job_id, s.name, s.occurrence, s.result from "jobkit".job_steps s
        where s.job_id operator(pg_catalog.=) p.id and s.status operator(pg_catalog.=) 'completed'
        offset 0
    ) t;
end
$$;

-- Whether one of these step names is longer than 200 characters (save_steps' check, run only when
-- the names together are longer than that).
create or replace function "jobkit"._long_step_name(p_names text[]) returns boolean
language sql immutable set search_path = '' as $$
    select exists (select 1 from unnest(p_names) as n(name) where pg_catalog.char_length(n.name) > 200)
$$;

-- Record steps of running attempts, many in one statement (the worker's group commit): each is
-- completed (its error null; p_results is a JSON array parallel to p_ids, null for all-null) or
-- failed (its error kept for debugging; it runs again on the next attempt). Fenced: a record is
-- written only while its attempt holds its job (processing, attempts unchanged) as of the
-- statement's snapshot; returns the (job id, attempt) pairs that held their job. A completed row
-- is never overwritten.
-- p_hold (transactional steps): the held jobs' rows are also locked FOR SHARE until the caller's
-- transaction ends, so a sweep or a cancel that moves a job on waits for that transaction, or
-- was seen by it: the step's work commits only while its attempt holds the job. Plain steps do
-- not lock (it costs each step a tuple lock on its job's row): a sweep that commits while their
-- statement runs can let a stale attempt's record of a step that did run and return land; it is
-- kept like any completed step (the next attempt returns it instead of running the step again),
-- and that attempt's own completion is still fenced out.
create or replace function "jobkit".save_steps(
    p_ids uuid[], p_attempts int[], p_names text[], p_occurrences int[], p_results jsonb,
    p_errors text[], p_tries int[], p_started_at timestamptz[], p_hold boolean default false
) returns table (id uuid, attempt int)
language plpgsql volatile set search_path = '' set plan_cache_mode = force_generic_plan as $$
declare
    v_n int := coalesce(pg_catalog.cardinality(p_ids), 0);
    v_held uuid[];
    v_attempts int[];
begin
    if pg_catalog.cardinality(p_attempts) is distinct from v_n
       or pg_catalog.cardinality(p_names) is distinct from v_n
       or pg_catalog.cardinality(p_occurrences) is distinct from v_n
       or (p_results is not null and (pg_catalog.jsonb_typeof(p_results) <> 'array'
                                      or pg_catalog.jsonb_array_length(p_results) <> v_n))
       or (p_errors is not null and pg_catalog.cardinality(p_errors) <> v_n)
       or (p_tries is not null and pg_catalog.cardinality(p_tries) <> v_n)
       or (p_started_at is not null and pg_catalog.cardinality(p_started_at) <> v_n) then
        raise exception 'jobkit.save_steps: every array must be as long as p_ids'
            using errcode = '22023', hint = 'pass one element per step record';
    end if;
    -- Simple expressions (no query to plan and start); a name's length is looked at one by one only
    -- when the names together are longer than one may be.
    if pg_catalog.array_position(p_names, null) is not null or '' = any (p_names)
       or pg_catalog.array_position(p_occurrences, null) is not null or 1 > any (p_occurrences)
       or (pg_catalog.octet_length(pg_catalog.array_to_string(p_names, '')) > 200
           and "jobkit"._long_step_name(p_names)) then
        raise exception 'jobkit.save_steps: a step needs a name of 1 to 200 characters and an occurrence >= 1'
            using errcode = '22023', hint = 'call ctx.step("name", fn) with a short, non-empty name';
    end if;
    if not p_hold then
        -- held: the (id, attempts) of the records written, each only while its own attempt holds
        -- its job (the insert's probe of jobs); a job once in the answer. The usual case,
        -- records of steps never stored, is a plain insert (no ON CONFLICT: no probe of the primary
        -- key before each row, no sort to keep one record per key); a record that meets a stored
        -- one (a failed step run again, a record sent again, a key twice in the batch) makes the
        -- primary key refuse it, and the batch is written again (the insert undone) as below.
        begin
            -- the fenced insert (sql/shared/steps.sql), the same text the worker's save_steps_direct runs
            with held as (
                insert into "jobkit".job_steps as t (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
                select h.id, u.name, (p_occurrences)[u.i], h.attempts,
                       case when (p_errors)[u.i] is null then 'completed' else 'failed' end,
                       case when (p_errors)[u.i] is null
                             and pg_catalog.jsonb_typeof(p_results
                                 operator(pg_catalog.->) (u.i::int operator(pg_catalog.-) 1)) operator(pg_catalog.<>) 'null'
                            then p_results operator(pg_catalog.->) (u.i::int operator(pg_catalog.-) 1) end,
                       (p_errors)[u.i], greatest(coalesce((p_tries)[u.i], 1), 1),
                       coalesce((p_started_at)[u.i], pg_catalog.now())
                from pg_catalog.unnest(p_names) with ordinality as u(name, i)
                cross join lateral (
                    select j.id, j.attempts from "jobkit".jobs j
                    where j.id operator(pg_catalog.=) (p_ids)[u.i]
                      and j.attempts operator(pg_catalog.=) (p_attempts)[u.i]
                      and j.status operator(pg_catalog.=) 'processing'
                    offset 0
                ) h
                returning t.job_id as id, t.attempt as attempts
            )
            select pg_catalog.array_agg(h.id), pg_catalog.array_agg(h.attempts) into v_held, v_attempts
            from (select distinct h.id, h.attempts from held h) h;
        exception when unique_violation then
            -- the last record of a key in the batch wins; a completed row is never overwritten
            with held as (
                select j.id, j.attempts from "jobkit".jobs j
                where j.id = any (p_ids) and j.status = 'processing' and j.attempts = any (p_attempts)
            ), stored as (
                insert into "jobkit".job_steps as t
                    (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
                select distinct on (u.id, u.name, u.occurrence)
                       u.id, u.name, u.occurrence, u.attempt,
                       case when p_errors[u.i] is null then 'completed' else 'failed' end,
                       case when p_errors[u.i] is null then nullif(p_results -> (u.i::int - 1), 'null'::jsonb) end,
                       p_errors[u.i], greatest(coalesce(p_tries[u.i], 1), 1), coalesce(p_started_at[u.i], now())
                from unnest(p_ids, p_attempts, p_names, p_occurrences)
                     with ordinality as u(id, attempt, name, occurrence, i)
                join held h on h.id = u.id and h.attempts = u.attempt
                order by u.id, u.name, u.occurrence, u.i desc
                on conflict (job_id, name, occurrence) do update
                    set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
                        error = excluded.error, tries = excluded.tries, started_at = excluded.started_at,
                        finished_at = now()
                    where t.status <> 'completed'
            )
            select pg_catalog.array_agg(h.id), pg_catalog.array_agg(h.attempts) into v_held, v_attempts
            from held h;
        end;
        return query select h.id, h.attempt from unnest(v_held, v_attempts) as h(id, attempt);
        return;
    end if;
    select pg_catalog.array_agg(h.id), pg_catalog.array_agg(h.attempts) into v_held, v_attempts from (
        select j.id, j.attempts from "jobkit".jobs j
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = any (select u.attempt from unnest(p_ids, p_attempts) as u(id, attempt)
                                where u.id = j.id)
        for share
    ) h;
    if v_held is null then
        return;
    end if;
    insert into "jobkit".job_steps as t
        (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
    select distinct on (u.id, u.name, u.occurrence)
           u.id, u.name, u.occurrence, u.attempt,
           case when p_errors[u.i] is null then 'completed' else 'failed' end,
           case when p_errors[u.i] is null then nullif(p_results -> (u.i::int - 1), 'null'::jsonb) end,
           p_errors[u.i], greatest(coalesce(p_tries[u.i], 1), 1), coalesce(p_started_at[u.i], now())
    from unnest(p_ids, p_attempts, p_names, p_occurrences)
         with ordinality as u(id, attempt, name, occurrence, i)
    where u.attempt = v_attempts[pg_catalog.array_position(v_held, u.id)]
    order by u.id, u.name, u.occurrence, u.i desc
    on conflict (job_id, name, occurrence) do update
        set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
            error = excluded.error, tries = excluded.tries, started_at = excluded.started_at,
            finished_at = now()
        where t.status <> 'completed';
    return query select h.id, h.attempt from unnest(v_held, v_attempts) as h(id, attempt);
end
$$;

-- The public API: sleeps, waits and events (issue 25)
-- sql/functions/47_waits.sql: a durable job's waits (ctx.sleep, wait_for_event, wait_any, wait_for_jobs), emit, and their sweep.
-- Applied in file-name order (after 45_steps.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.
--
-- A wait ends its attempt (suspend_job, fenced like a completion; the attempt is not consumed). The
-- job goes 'waiting' with one row in job_waits, or straight back to pending when what it waits for
-- is already there. Resolving a wait (_resolve_waits) deletes that row, records its outcome as a
-- job_steps row of kind 'wait' (the replaying handler returns it like a completed step) and makes the
-- job pending. Who resolves: emit (in its own transaction, for the waits registered before it), the
-- registration itself (latch: an event emitted before the wait), the finishing of awaited jobs
-- (_jobs_finished, from _notify_done), due times (the claim of the type, _wake_due; the worker's timer
-- is set by the wake-up suspend_job sends and by next_due), and sweep_waits, the backstop that
-- sweep_stuck runs (a lost wake-up, an emit whose snapshot could not see a wait).
--
-- Races: an emit and a wait registration on the same event take the same transaction-level
-- advisory lock (_lock_events; a bulk emit takes one for its whole name), and each looks for the
-- other after taking it: the later one sees the earlier one committed. A wait for jobs share-locks them before it reads their states, and a
-- finishing job locks the waits on it before it reads the other awaited jobs' states: the last to
-- lock sees every other committed. Lock order everywhere: event locks, job_waits rows, jobs rows.

-- The token of an event name and key in job_waits.events (a null key is ''). plpgsql, as
-- _event_json: a SQL function with a pinned search_path is not inlined, and is parsed and planned
-- again for every statement that calls it; plpgsql keeps its expression for the session.
create or replace function "jobkit"._event_token(p_name text, p_key text) returns text
language plpgsql immutable set search_path = '' as $$
begin
    return p_name operator(pg_catalog.||) pg_catalog.chr(31) operator(pg_catalog.||) coalesce(p_key, '');
end
$$;

-- Serialise emits and wait registrations of the same events, in two levels: each event name
-- shared, then each name and key exclusively (each level in lock-key order: no deadlock between them). A call
-- with more than 64 keys of one name (a row trigger's bulk emit) takes that name exclusively instead
-- of a lock per key, which a statement of 10,000 rows would need 10,000 of (more than PostgreSQL's
-- shared lock table holds by default: "out of shared memory").
create or replace function "jobkit"._lock_events(p_tokens text[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_whole text[] := '{}';  -- the names locked whole
begin
    if pg_catalog.cardinality(p_tokens) = 1 then  -- one event (an emit, most waits): no query
        perform pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended(
                    'jobkit.event_name:' operator(pg_catalog.||)
                    pg_catalog.split_part(p_tokens[1], pg_catalog.chr(31), 1), 0)),
                pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
                    'jobkit.event:' operator(pg_catalog.||) p_tokens[1], 0));
        return;
    end if;
    if pg_catalog.cardinality(p_tokens) > 64 then
        v_whole := array(select pg_catalog.split_part(u.t, pg_catalog.chr(31), 1)
                         from pg_catalog.unnest(p_tokens) as u(t)
                         group by 1 having pg_catalog.count(distinct u.t) > 64);
    end if;
    perform case when x.whole then pg_catalog.pg_advisory_xact_lock(x.k)
                 else pg_catalog.pg_advisory_xact_lock_shared(x.k) end
    from (select distinct pg_catalog.hashtextextended(
                     'jobkit.event_name:' operator(pg_catalog.||) n.n, 0) as k,
                 n.n operator(pg_catalog.=) any (v_whole) as whole
          from pg_catalog.unnest(p_tokens) as u(t)
          cross join lateral (select pg_catalog.split_part(u.t, pg_catalog.chr(31), 1) as n) n
          order by 1) x;
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('jobkit.event:' operator(pg_catalog.||) x.t, 0))
    from (select distinct u.t from pg_catalog.unnest(p_tokens) as u(t)
          where pg_catalog.split_part(u.t, pg_catalog.chr(31), 1) operator(pg_catalog.<>) all (v_whole)
          order by u.t) x;
end
$$;

-- An event as a wait returns it.
create or replace function "jobkit"._event_json(p_event "jobkit".events) returns jsonb
language plpgsql stable set search_path = '' as $$
begin
    return pg_catalog.jsonb_build_object(
        'event', p_event.name, 'key', nullif(p_event.key, ''), 'data', p_event.data, 'id', p_event.id,
        'generation', p_event.generation, 'emitted_at', p_event.emitted_at);
end
$$;

-- Resolve these open waits: their rows deleted, their outcomes (p_results, parallel to p_ids; null:
-- all null, a sleep's end or a timeout) stored as steps of kind 'wait', their jobs pending now.
-- p_wake: wake the workers of their types (not from a claim, which runs them itself).
create or replace function "jobkit"._resolve_waits(p_ids uuid[], p_results jsonb[], p_wake boolean default true)
returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_types text[];
    r record;
begin
    if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
        return 0;
    end if;
    with gone as (
        delete from "jobkit".job_waits w where w.job_id = any (p_ids)
        returning w.job_id, w.step, w.occurrence, w.attempt, w.created_at
    ), stepped as (
        insert into "jobkit".job_steps as t (job_id, name, occurrence, attempt, status, result, started_at, kind)
        select g.job_id, g.step, g.occurrence, g.attempt, 'completed',
               p_results[pg_catalog.array_position(p_ids, g.job_id)], g.created_at, 'wait'
        from gone g
        on conflict (job_id, name, occurrence) do update
            set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
                error = null, started_at = excluded.started_at, finished_at = pg_catalog.now(), kind = 'wait'
            where t.status <> 'completed'
    ), woken as (
        update "jobkit".jobs j
        set status = 'pending', scheduled_for = pg_catalog.now(), updated_at = pg_catalog.now()
        from gone g
        where j.id = g.job_id and j.status = 'waiting'
        returning j.type
    )
    select pg_catalog.array_agg(w.type) into v_types from woken w;
    if p_wake and v_types is not null then
        for r in select u.t, pg_catalog.count(*) as n from pg_catalog.unnest(v_types) as u(t) group by u.t loop
            perform "jobkit"._wake_for(r.t, r.n, null);
        end loop;
    end if;
    return coalesce(pg_catalog.cardinality(v_types), 0);
end
$$;

-- End a running attempt in a wait (ctx.sleep, wait_for_event, wait_any, wait_for_jobs), fenced like a
-- completion: the attempt is not consumed (recorded as 'waited'). p_step, p_occurrence: the wait's
-- step (its outcome's job_steps row). p_kind 'sleep' (until p_due), 'event' (any of p_events with
-- their p_keys, parallel; a null key is ''), 'jobs' (all of p_job_ids finished: completed, failed,
-- dead, cancelled or deleted). p_due: a sleep's end, else the timeout (null: none); p_delay: the
-- same from now by the database's clock (both: the earlier). Returns
-- 'waiting', 'pending' (what it waits for is already there: resolved at once, the job runs again
-- now), or null when the attempt no longer holds the job.
create or replace function "jobkit".suspend_job(
    p_id uuid, p_attempt int, p_step text, p_occurrence int, p_kind text,
    p_events text[] default null, p_keys text[] default null, p_due timestamptz default null,
    p_job_ids uuid[] default null, p_delay interval default null
) returns text
language plpgsql volatile set search_path = '' as $$
declare
    v_tokens text[];
    v_job record;
    v_event "jobkit".events;
    v_result jsonb;
    v_resolved boolean := false;
    v_statuses jsonb;
    v_due timestamptz;
begin
    if p_delay is not null and (not pg_catalog.isfinite(p_delay) or p_delay < interval '0') then
        raise exception 'jobkit.suspend_job: p_delay must be a finite, non-negative interval' using errcode = '22023';
    end if;
    v_due := case when p_delay is null then p_due
                  else least(p_due, pg_catalog.now() + p_delay) end;
    if p_kind is null or p_kind not in ('sleep', 'event', 'jobs') then
        raise exception 'jobkit.suspend_job: p_kind must be sleep, event or jobs, got %', p_kind
            using errcode = '22023';
    end if;
    if p_step is null or pg_catalog.char_length(p_step) not between 1 and 200
       or p_occurrence is null or p_occurrence < 1 then
        raise exception 'jobkit.suspend_job: a wait needs a step name of 1 to 200 characters and an occurrence >= 1'
            using errcode = '22023', hint = 'give the wait a short, non-empty name';
    end if;
    if v_due is not null and not pg_catalog.isfinite(v_due) then
        raise exception 'jobkit.suspend_job: p_due must be a finite time' using errcode = '22023';
    end if;
    if p_kind = 'sleep' and v_due is null then
        raise exception 'jobkit.suspend_job: a sleep needs p_due or p_delay (when it ends)' using errcode = '22023';
    end if;
    if p_kind = 'event' then
        if coalesce(pg_catalog.cardinality(p_events), 0) = 0
           or (p_keys is not null and pg_catalog.cardinality(p_keys) <> pg_catalog.cardinality(p_events))
           or exists (select 1 from pg_catalog.unnest(p_events) as e(n)
                      where e.n is null or pg_catalog.char_length(e.n) not between 1 and 200
                         or pg_catalog.strpos(e.n, pg_catalog.chr(31)) > 0)
           or exists (select 1 from pg_catalog.unnest(p_keys) as k(k) where pg_catalog.char_length(k.k) > 1000) then
            raise exception 'jobkit.suspend_job: an event wait needs event names of 1 to 200 characters (keys up to 1000), p_keys as long as p_events'
                using errcode = '22023', hint = 'call ctx.wait_for_event("order.shipped", key="42")';
        end if;
        v_tokens := array(select "jobkit"._event_token(u.n, u.k)
                          from unnest(p_events, p_keys) as u(n, k) where u.n is not null);
        perform "jobkit"._lock_events(v_tokens);
    elsif p_kind = 'jobs' then
        if coalesce(pg_catalog.cardinality(p_job_ids), 0) = 0 or p_id = any (p_job_ids)
           or pg_catalog.array_position(p_job_ids, null) is not null then
            raise exception 'jobkit.suspend_job: a jobs wait needs the ids of other jobs'
                using errcode = '22023', hint = 'call ctx.wait_for_jobs([child_id, ...])';
        end if;
        -- their rows locked before their states are read: a finishing job waits for this
        -- registration, or was seen finished by it
        perform 1 from "jobkit".jobs x where x.id = any (p_job_ids) order by x.id for share;
        select pg_catalog.jsonb_object_agg(u.id::text, coalesce(j.status, 'gone')),
               coalesce(pg_catalog.bool_and(j.status is null or j.status in ('completed', 'failed', 'dead', 'cancelled')), true)
        into v_statuses, v_resolved
        from (select distinct i.id from pg_catalog.unnest(p_job_ids) as i(id)) u
        left join "jobkit".jobs j on j.id = u.id;
        if v_resolved then
            v_result := pg_catalog.jsonb_build_object('jobs', v_statuses);
        end if;
    end if;
    select j.type, j.created_at, j.worker_id, j.started_at into v_job
    from "jobkit".jobs j
    where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
    for update;
    if not found then
        return null;
    end if;
    if p_kind = 'event' then  -- latch: the earliest event it has not consumed yet, since the job began
        select e.* into v_event
        from "jobkit".events e
        join unnest(p_events, p_keys) as u(n, k) on e.name = u.n and e.key = coalesce(u.k, '')
        where e.emitted_at >= v_job.created_at and e.expires_at > pg_catalog.now()
          and not exists (select 1 from "jobkit".job_steps s
                          where s.job_id = p_id and s.kind = 'wait' and s.result ->> 'id' = e.id::text)
        order by e.emitted_at, e.id
        limit 1;
        if found then
            v_resolved := true;
            v_result := "jobkit"._event_json(v_event);
        end if;
    end if;
    if not v_resolved and v_due is not null and v_due <= pg_catalog.now() then
        v_resolved := true;  -- its time has come already: a sleep's end, a timeout (null)
    end if;
    update "jobkit".jobs j
    set status = case when v_resolved then 'pending' else 'waiting' end, attempts = j.attempts - 1,
        scheduled_for = case when v_resolved then pg_catalog.now() else coalesce(v_due, pg_catalog.now()) end,
        lease_expires_at = null, updated_at = pg_catalog.now()
    where j.id = p_id;
    insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome)
    values (p_id, p_attempt, v_job.worker_id, v_job.started_at, 'waited');
    if v_resolved then
        insert into "jobkit".job_steps as t (job_id, name, occurrence, attempt, status, result, started_at, kind)
        values (p_id, p_step, p_occurrence, p_attempt, 'completed', v_result, pg_catalog.now(), 'wait')
        on conflict (job_id, name, occurrence) do update
            set attempt = excluded.attempt, status = excluded.status, result = excluded.result, error = null,
                started_at = excluded.started_at, finished_at = pg_catalog.now(), kind = 'wait'
            where t.status <> 'completed';
        perform "jobkit"._wake_for(v_job.type, 1, null);
        return 'pending';
    end if;
    insert into "jobkit".job_waits as w (job_id, type, step, occurrence, attempt, kind, events, job_ids, due)
    values (p_id, v_job.type, p_step, p_occurrence, p_attempt, p_kind, v_tokens,
            case when p_kind = 'jobs' then p_job_ids end, v_due)
    on conflict (job_id) do update
        set type = excluded.type, step = excluded.step, occurrence = excluded.occurrence,
            attempt = excluded.attempt, kind = excluded.kind, events = excluded.events,
            job_ids = excluded.job_ids, due = excluded.due, created_at = pg_catalog.now();
    if v_due is not null then
        perform "jobkit"._wake_for(v_job.type, 0, v_due);  -- the worker sets its timer for it
    end if;
    return 'waiting';
end
$$;

-- Store an event and wake what waits for it, in this transaction: every wait registered before it
-- is resolved with it (each waiting job gets it once), a wait registered after it still sees it
-- (latch), and each subscriber type of [events."<name>"] gets one job (payload: the event). A null
-- key is ''. p_id: the emit's own id; an emit retried with the same name, key and id is the same
-- event (nothing happens again; its id is returned). Every emit is otherwise a new generation of its
-- name and key. Kept for the event's retention (default 7 days). Callable from triggers, RPC and
-- pg_cron. Emit from a READ COMMITTED transaction: in REPEATABLE READ or SERIALIZABLE, the wait that
-- registered after this transaction's snapshot is found by sweep_waits instead (within a minute).
-- One event of _emit_many, which does the work. An event's time is the emit's own
-- (clock_timestamp), not its transaction's start: a job created while the emitting transaction was
-- open counts it as emitted since it began.
create or replace function "jobkit".emit(p_name text, p_key text default null, p_data jsonb default null,
                                       p_id text default null)
returns bigint
language plpgsql volatile set search_path = '' as $$
declare
    v_ids bigint[] := "jobkit"._emit_many(p_name, array[p_key], array[p_data], array[p_id]);
begin
    if v_ids[1] is not null then
        return v_ids[1];
    end if;
    -- a retried emit (the same name, key and id): the stored event
    return (select e.id from "jobkit".events e
            where e.name = p_name and e.key = coalesce(p_key, '') and e.dedupe = p_id);
end
$$;

-- emit, set-based: events of one name, one per element of p_keys (p_data and p_ids parallel to it,
-- or null), stored by one insert; the waits on any of them resolved in one pass (a job waiting on
-- several gets the earliest); the subscribers' jobs enqueued (one event: an enqueue per subscriber;
-- more: one enqueue_many). The same key twice makes two generations, in input order. An element
-- whose name, key and id are stored already (a retried emit, or an id repeated in the call) stores
-- nothing and does nothing. Returns the stored events' ids in input order. A declared row trigger
-- with emit calls it once per statement, with every row's key and data (sql/row_trigger.sql).
-- plan_cache_mode = force_generic_plan (for the calls it makes too): with the arrays as constants,
-- a custom plan of one element always looked cheaper than the generic one, so every call planned
-- its statements again (bench.callgrind --ops emit: 1.8M instructions an emit, against 0.72M).
create or replace function "jobkit"._emit_many(p_name text, p_keys text[], p_data jsonb[] default null,
                                             p_ids text[] default null)
returns bigint[]
language plpgsql volatile set search_path = '' set plan_cache_mode = force_generic_plan as $$
declare
    v_tokens text[];
    v_longest int;
    v_types text[];
    v_retention interval;
    v_new bigint[];  -- the stored events: ids, tokens and jsons, parallel, in input order
    v_new_tokens text[];
    v_jsons jsonb[];
    v_waits uuid[];
    v_results jsonb[];
begin
    select pg_catalog.array_agg("jobkit"._event_token(p_name, coalesce(k.k, ''))),
           pg_catalog.max(pg_catalog.char_length(k.k))
    into v_tokens, v_longest
    from pg_catalog.unnest(p_keys) as k(k);
    if p_name is null or pg_catalog.char_length(p_name) not between 1 and 200
       or pg_catalog.strpos(p_name, pg_catalog.chr(31)) > 0 or v_longest > 1000 then
        raise exception 'jobkit.emit: an event needs a name of 1 to 200 characters (and a key of at most 1000)'
            using errcode = '22023', hint = 'call jobkit.emit(''order.shipped'', ''42'', ''{"carrier": "ups"}'')';
    end if;
    if v_tokens is null then
        return '{}';
    end if;
    perform "jobkit"._lock_events(v_tokens);
    select c.types, c.retention into v_types, v_retention from "jobkit".event_config c where c.name = p_name;
    with stored as (
        insert into "jobkit".events as e (name, key, generation, data, dedupe, emitted_at, expires_at)
        select p_name, u.key,
               coalesce((select pg_catalog.max(x.generation) from "jobkit".events x
                         where x.name = p_name and x.key = u.key), 0)
               + pg_catalog.row_number() over (partition by u.key order by u.ord),
               u.data, u.dedupe, pg_catalog.clock_timestamp(), pg_catalog.now() + coalesce(v_retention, interval '7 days')
        from (select coalesce(i.k, '') as key, i.data, i.dedupe, i.ord
              from unnest(p_keys, p_data, p_ids) with ordinality as i(k, data, dedupe, ord)) u  -- ROWS FROM
        order by u.ord
        on conflict (name, key, dedupe) where dedupe is not null do nothing
        returning e.id, "jobkit"._event_token(e.name, e.key) as token, "jobkit"._event_json(e) as json
    )
    select pg_catalog.array_agg(x.id order by x.id), pg_catalog.array_agg(x.token order by x.id),
           pg_catalog.array_agg(x.json order by x.id)
    into v_new, v_new_tokens, v_jsons
    from stored x;
    if v_new is null then
        return '{}';
    end if;
    -- the waits on any of them, each with the earliest it waits for (ids ascend in input order)
    select pg_catalog.array_agg(w.job_id), pg_catalog.array_agg(v_jsons[w.i]) into v_waits, v_results from (
        select x.job_id, (select pg_catalog.min(pg_catalog.array_position(v_new_tokens, t.t))
                          from pg_catalog.unnest(x.events) as t(t)) as i
        from "jobkit".job_waits x
        where x.events operator(pg_catalog.&&) v_new_tokens order by x.job_id for update
    ) w;
    if v_waits is not null then
        perform "jobkit"._resolve_waits(v_waits, v_results);
    end if;
    if v_types is null then
        return v_new;
    elsif pg_catalog.cardinality(v_new) = 1 then
        perform "jobkit".enqueue(p_type => t.t, p_payload => v_jsons[1],
                                p_idempotency_key => 'event:' operator(pg_catalog.||) v_new[1]::pg_catalog.text)
        from pg_catalog.unnest(v_types) as t(t);
    else
        perform 1 from "jobkit".enqueue_many(
            array(select t.t from pg_catalog.generate_subscripts(v_new, 1) as n(i),
                  pg_catalog.unnest(v_types) with ordinality as t(t, o) order by n.i, t.o),
            array(select v_jsons[n.i] from pg_catalog.generate_subscripts(v_new, 1) as n(i),
                  pg_catalog.unnest(v_types) with ordinality as t(t, o) order by n.i, t.o),
            p_idempotency_key => array(
                select 'event:' operator(pg_catalog.||) v_new[n.i]::pg_catalog.text
                from pg_catalog.generate_subscripts(v_new, 1) as n(i),
                     pg_catalog.unnest(v_types) with ordinality as t(t, o) order by n.i, t.o));
    end if;
    return v_new;
end
$$;

-- Resolve the waits whose due time has passed (sleeps that end, waits that time out), up to
-- p_limit of them, of one type (null: every type). Waits another transaction holds are skipped.
-- plan_cache_mode = auto, not the generic plans of claim_jobs (which calls it): "p_type is null or"
-- folds away only when the plan knows p_type.
create or replace function "jobkit"._wake_due(p_type text, p_limit int, p_wake boolean default true)
returns int
language plpgsql volatile set search_path = '' set plan_cache_mode = auto as $$
declare
    v_ids uuid[];
begin
    select pg_catalog.array_agg(w.job_id) into v_ids from (
        select x.job_id from "jobkit".job_waits x
        where (p_type is null or x.type = p_type) and x.due <= pg_catalog.now()
        order by x.due limit greatest(p_limit, 1)
        for update skip locked
    ) w;
    return "jobkit"._resolve_waits(v_ids, null, p_wake);
end
$$;

-- These jobs finished (completed, failed, cancelled; called by _notify_done): resolve the jobs
-- waits all of whose jobs have now finished. Nobody waits for jobs: one probe of an empty index.
create or replace function "jobkit"._jobs_finished(p_ids uuid[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_locked uuid[];
begin
    select pg_catalog.array_agg(w.job_id) into v_locked from (
        select x.job_id from "jobkit".job_waits x
        where x.job_ids && p_ids order by x.job_id for update
    ) w;
    if v_locked is not null then
        perform "jobkit"._resolve_jobs_waits(v_locked);
    end if;
end
$$;

-- Of these (locked) jobs waits, resolve the ones whose jobs have all finished, with their states.
create or replace function "jobkit"._resolve_jobs_waits(p_ids uuid[]) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_results jsonb[];
begin
    select pg_catalog.array_agg(w.job_id), pg_catalog.array_agg(pg_catalog.jsonb_build_object('jobs', s.states))
    into v_ids, v_results
    from "jobkit".job_waits w
    cross join lateral (
        select pg_catalog.jsonb_object_agg(u.id::text, coalesce(j.status, 'gone')) as states,
               coalesce(pg_catalog.bool_and(j.status is null
                        or j.status in ('completed', 'failed', 'dead', 'cancelled')), true) as done
        from (select distinct i.id from pg_catalog.unnest(w.job_ids) as i(id)) u
        left join "jobkit".jobs j on j.id = u.id
    ) s
    where w.job_id = any (p_ids) and w.kind = 'jobs' and s.done;
    return "jobkit"._resolve_waits(v_ids, v_results);
end
$$;

-- Event waits (of p_ids; null: any) that a stored event matches: the earliest one each has not
-- consumed, emitted since its job began.
create or replace function "jobkit"._missed_events(p_ids uuid[], p_limit int)
returns table (job_id uuid, result jsonb)
language sql stable set search_path = '' as $$
    select distinct on (w.job_id) w.job_id, "jobkit"._event_json(e)
    from "jobkit".job_waits w
    join "jobkit".jobs j on j.id = w.job_id
    cross join lateral pg_catalog.unnest(w.events) as t(token)
    join "jobkit".events e
      on e.name = pg_catalog.split_part(t.token, pg_catalog.chr(31), 1)
     and e.key = pg_catalog.substr(t.token, pg_catalog.strpos(t.token, pg_catalog.chr(31)) + 1)
    where w.kind = 'event' and (p_ids is null or w.job_id = any (p_ids))
      and e.emitted_at >= j.created_at and e.expires_at > pg_catalog.now()
      and not exists (select 1 from "jobkit".job_steps s
                      where s.job_id = w.job_id and s.kind = 'wait' and s.result ->> 'id' = e.id::text)
    order by w.job_id, e.emitted_at, e.id
    limit p_limit
$$;

-- The backstop (sweep_stuck runs it): resolves what nothing resolved. Waits past their due time
-- (a lost wake-up); event waits that a stored event matches (an emit whose snapshot predated the
-- wait); jobs waits whose jobs all finished or were deleted; a waiting job without a wait is made
-- pending (it replays and waits again), a wait whose job no longer waits is deleted. Expired events
-- are deleted. Returns how many jobs it made pending.
create or replace function "jobkit".sweep_waits(p_limit int default 1000) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_count int := 0;
    v_ids uuid[];
    v_results jsonb[];
    v_types text[];
    r record;
begin
    v_count := "jobkit"._wake_due(null, p_limit);
    select pg_catalog.array_agg(m.job_id) into v_ids from "jobkit"._missed_events(null, p_limit) m;
    if v_ids is not null then
        select pg_catalog.array_agg(x.job_id) into v_ids from (
            select w.job_id from "jobkit".job_waits w where w.job_id = any (v_ids)
            order by w.job_id for update skip locked
        ) x;
        select pg_catalog.array_agg(m.job_id), pg_catalog.array_agg(m.result) into v_ids, v_results
        from "jobkit"._missed_events(v_ids, p_limit) m;
        v_count := v_count + "jobkit"._resolve_waits(v_ids, v_results);
    end if;
    select pg_catalog.array_agg(x.job_id) into v_ids from (
        select w.job_id from "jobkit".job_waits w where w.kind = 'jobs'
        order by w.job_id limit p_limit for update skip locked
    ) x;
    if v_ids is not null then
        v_count := v_count + "jobkit"._resolve_jobs_waits(v_ids);
    end if;
    delete from "jobkit".job_waits w
    where w.job_id = any (array(
        select x.job_id from "jobkit".job_waits x
        left join "jobkit".jobs j on j.id = x.job_id
        where j.id is null or j.status <> 'waiting'
        limit p_limit for update of x skip locked
    ));
    with lost as (
        update "jobkit".jobs j set status = 'pending', scheduled_for = pg_catalog.now(), updated_at = pg_catalog.now()
        where j.id = any (array(
            select x.id from "jobkit".jobs x
            where x.status = 'waiting' and x.scheduled_for <= pg_catalog.now() - interval '1 minute'
              and not exists (select 1 from "jobkit".job_waits w where w.job_id = x.id)
            limit p_limit for update of x skip locked
        ))
        returning j.type
    )
    select pg_catalog.array_agg(l.type) into v_types from lost l;
    for r in select u.t, pg_catalog.count(*) as n from pg_catalog.unnest(v_types) as u(t) group by u.t loop
        perform "jobkit"._wake_for(r.t, r.n, null);
    end loop;
    v_count := v_count + coalesce(pg_catalog.cardinality(v_types), 0);
    delete from "jobkit".events e where e.id = any (array(
        select x.id from "jobkit".events x where x.expires_at < pg_catalog.now() limit 10000));
    return v_count;
end
$$;

-- The public API: job graphs (jobkit.flow, issue 25)
-- sql/functions/48_flows.sql: a graph inserted in one statement per table, children released as their parents end, the blocked sweep, cancel/pause/resume of a flow, and replay from a step.
-- Applied in file-name order (after 45_steps.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.

-- Insert a whole graph in one transaction: one INSERT ... SELECT for its jobs and one for its edges.
-- Jobs are given as JSON documents (p_types: an array, or one string for all; p_payloads: an array),
-- the other columns as arrays parallel to them (null = defaults); edges as three parallel arrays of
-- 1-based positions (p_parents[k] -> p_children[k]) and policies ('fail' when null). A parent must
-- come before its child (p_parents[k] < p_children[k]): a graph in that order has no cycle, so no
-- job of it can be blocked forever by its own descendants. A job with parents is inserted
-- 'blocked' with blocked_by = its number of parents; the others are pending and woken as any job.
-- p_fan_in (a gather, jobkit.gather): no edges are given; the last job is after all the others by
-- 'run' edges that are not stored (flows.fan_in names it, 0024), so a fan-in of N jobs costs a
-- counter instead of N edge rows. Returns the flow's id and the jobs' ids in input order.
create or replace function "jobkit".create_flow(
    p_name text,
    p_types jsonb,
    p_payloads jsonb,
    p_parents int[],
    p_children int[],
    p_policies text[] default null,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_trace_context jsonb default null,
    p_owner text default null,
    p_fan_in boolean default false
) returns table (flow_id uuid, job_ids uuid[])
language plpgsql volatile set search_path = '' as $$
declare
    v_n int;
    v_edges int := coalesce(pg_catalog.cardinality(p_parents), 0);
    v_flow uuid := pg_catalog.gen_random_uuid();
    v_ids uuid[];
    v_one text;
    v_fan int;  -- the fan-in's position
begin
    if pg_catalog.jsonb_typeof(p_payloads) is distinct from 'array'
       or pg_catalog.jsonb_typeof(p_types) not in ('array', 'string') then
        raise exception 'jobkit.create_flow: p_payloads must be a JSON array, p_types a JSON array or string'
            using errcode = '22023', hint = 'pass one payload per job';
    end if;
    v_n := pg_catalog.jsonb_array_length(p_payloads);
    if v_n = 0 or (pg_catalog.jsonb_typeof(p_types) = 'array' and pg_catalog.jsonb_array_length(p_types) <> v_n) then
        raise exception 'jobkit.create_flow: a flow needs at least one job, and as many types as payloads'
            using errcode = '22023', hint = 'pass one type per payload, or one type for all';
    end if;
    v_one := case when pg_catalog.jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    if coalesce(v_one, 'x') = '' or exists (
           select 1 from pg_catalog.jsonb_array_elements(
                             case when v_one is null then p_types else '[]'::jsonb end) as t(v)
           where pg_catalog.jsonb_typeof(t.v) is distinct from 'string' or t.v #>> '{}' = '') then
        raise exception 'jobkit.create_flow: every job type must be a non-empty string'
            using errcode = '22023', hint = 'name a registered job type for each job';
    end if;
    if pg_catalog.cardinality(p_children) is distinct from pg_catalog.cardinality(p_parents)
       or (p_policies is not null and pg_catalog.cardinality(p_policies) <> v_edges) then
        raise exception 'jobkit.create_flow: p_parents, p_children and p_policies must be as long as each other'
            using errcode = '22023', hint = 'pass one element per edge';
    end if;
    if exists (select 1 from unnest(p_parents, p_children, p_policies) as e(p, c, pol)
               where e.p is null or e.c is null or e.p < 1 or e.c > v_n or e.p >= e.c
                  or coalesce(e.pol, 'fail') not in ('fail', 'cancel', 'run')) then
        raise exception 'jobkit.create_flow: each edge joins an earlier job (parent) to a later one (child), by 1-based position, with a policy fail, cancel or run'
            using errcode = '22023', hint = 'list a parent before its children (a graph in that order has no cycle)';
    end if;
    if p_fan_in and v_edges > 0 then
        raise exception 'jobkit.create_flow: a fan-in (p_fan_in) takes no edges: its last job is after all the others'
            using errcode = '22023', hint = 'pass empty p_parents and p_children with p_fan_in => true';
    end if;
    v_fan := case when coalesce(p_fan_in, false) and v_n > 1 then v_n end;
    -- Ids are drawn first: edges refer to them by position, and they come back in input order.
    v_ids := array(select pg_catalog.gen_random_uuid() from pg_catalog.generate_series(1, v_n));
    insert into "jobkit".flows (id, name, owner, fan_in) values (v_flow, p_name, p_owner, v_ids[v_fan]);
    insert into "jobkit".jobs (id, type, payload, priority, scheduled_for, max_attempts, trace_context,
                              concurrency_key, owner, flow_id, status, blocked_by, created_at)
    select v_ids[e.n], x.type, e.v, coalesce(p_priority[e.n], 0), coalesce(p_run_at[e.n], pg_catalog.now()),
           p_max_attempts[e.n], p_trace_context,
           case when t.key_template is not null then "jobkit"._render_key(t.key_template, e.v)
                when t.fair then '' end,
           p_owner, v_flow,
           case when d.parents is null then 'pending' else 'blocked' end, d.parents,
           pg_catalog.now() + (e.n - 1) * interval '1 microsecond'  -- the given order, for show and parents()
    from pg_catalog.jsonb_array_elements(p_payloads) with ordinality as e(v, n)
    cross join lateral (select coalesce(v_one, p_types ->> (e.n - 1)::int) as type) x
    left join (select u.c, pg_catalog.count(*)::int as parents from unnest(p_children) as u(c) group by u.c
               union all
               select v_fan, v_n - 1 where v_fan is not null) d
           on d.c = e.n
    left join "jobkit".job_types t on t.type = x.type and t.fair;
    -- An edge given twice is refused by job_edges' primary key (the ids are new, so no other
    -- transaction's edge can collide): no pass over the edges to look for one beforehand.
    begin
        insert into "jobkit".job_edges (parent_id, child_id, on_parent_failure)
        select v_ids[e.p], v_ids[e.c], coalesce(e.pol, 'fail')
        from unnest(p_parents, p_children, p_policies) as e(p, c, pol);
    exception when unique_violation then
        raise exception 'jobkit.create_flow: an edge is given twice'
            using errcode = '22023', hint = 'give each parent -> child edge once';
    end;
    return query select v_flow, v_ids;
end
$$;

-- Tell the children of jobs that just ended (completed, failed, dead or cancelled) that they did,
-- once per parent (children_settled): a completed parent, or a failed or cancelled one behind a
-- 'run' edge, takes one off the child's blocked_by, and at zero the child is pending (unless its
-- flow is paused) and its type is woken; a failed parent fails a 'fail' child and cancels a
-- 'cancel' child, a cancelled parent cancels both. A child failed or cancelled so is itself a parent
-- that ended: the loop carries the failure down the graph, one level per pass. O(children): the
-- edges are read by their parent (the primary key); a gather's fan-in (flows.fan_in, 0024) is a
-- 'run' edge from each job of its flow created before it, read from the flow. Called by the finishing statements only for
-- jobs of a flow (flow_id not null): a plain job never gets here.
create or replace function "jobkit"._settle_children(p_ids uuid[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_parents uuid[] := p_ids;
    v_children uuid[];
    v_done int[];
    v_fails boolean[];
    v_cancels boolean[];
    v_paused boolean[];
    v_ended uuid[];
    r record;
begin
    while coalesce(pg_catalog.cardinality(v_parents), 0) > 0 loop
        with ended as (
            update "jobkit".jobs p set children_settled = true
            where p.id = any (v_parents) and p.flow_id is not null and p.children_settled is null
              and p.status in ('completed', 'failed', 'dead', 'cancelled')
            returning p.id, p.status, p.flow_id, p.created_at
        ), edges as (  -- the stored edges, and a fan-in's (the flow's callback, after the jobs created before it)
            select d.status, d.flow_id, e.child_id, e.on_parent_failure
            from ended d join "jobkit".job_edges e on e.parent_id = d.id
            union all
            select d.status, d.flow_id, g.fan_in, 'run'
            from ended d
            join "jobkit".flows g on g.id = d.flow_id
            join "jobkit".jobs c on c.id = g.fan_in and c.created_at > d.created_at
        ), told as (
            select e.child_id,
                   (pg_catalog.count(*) filter (where e.status = 'completed' or e.on_parent_failure = 'run'))::int
                       as done,
                   pg_catalog.bool_or(e.status in ('failed', 'dead') and e.on_parent_failure = 'fail') as fails,
                   pg_catalog.bool_or(e.status <> 'completed' and e.on_parent_failure <> 'run') as cancels,
                   pg_catalog.bool_or(f.paused_at is not null) as paused
            from edges e
            left join "jobkit".flows f on f.id = e.flow_id
            group by e.child_id
        )
        select pg_catalog.array_agg(t.child_id order by t.child_id), pg_catalog.array_agg(t.done order by t.child_id),
               pg_catalog.array_agg(t.fails order by t.child_id), pg_catalog.array_agg(t.cancels order by t.child_id),
               pg_catalog.array_agg(t.paused order by t.child_id)
        into v_children, v_done, v_fails, v_cancels, v_paused
        from told t;
        exit when v_children is null;
        -- children locked in id order: concurrent completions of parents they share never deadlock
        perform 1 from "jobkit".jobs c where c.id = any (v_children) order by c.id for update;
        v_ended := null;
        for r in
            with changed as (
                update "jobkit".jobs j
                set blocked_by = greatest(j.blocked_by - t.done, 0),
                    status = case when t.fails then 'failed' when t.cancels then 'cancelled'
                                  when j.blocked_by - t.done > 0 or t.paused then 'blocked'
                                  else 'pending' end,
                    scheduled_for = case when t.fails or t.cancels then j.scheduled_for
                                         else greatest(j.scheduled_for, pg_catalog.now()) end,
                    completed_at = case when t.fails or t.cancels then pg_catalog.now() end,
                    last_error = case when t.fails then 'a parent of this job failed (on_parent_failure = fail)'
                                      when t.cancels then 'a parent of this job failed or was cancelled'
                                      else j.last_error end,
                    updated_at = pg_catalog.now()
                from unnest(v_children, v_done, v_fails, v_cancels, v_paused) as t(child_id, done, fails, cancels, paused)
                where j.id = t.child_id and j.status = 'blocked'
                returning j.id, j.status, j.type, j.scheduled_for
            )
            select c.type, c.status, pg_catalog.array_agg(c.id) as ids,
                   pg_catalog.count(*) filter (where c.scheduled_for <= pg_catalog.now()) as due,
                   pg_catalog.min(c.scheduled_for) filter (where c.scheduled_for > pg_catalog.now()) as at
            from changed c where c.status <> 'blocked' group by c.type, c.status
        loop
            if r.status = 'pending' then
                perform "jobkit"._wake_for(r.type, r.due, r.at);
            else
                v_ended := coalesce(v_ended, '{}') || r.ids;
            end if;
        end loop;
        if v_ended is not null then
            perform "jobkit"._notify_done(v_ended);
        end if;
        v_parents := v_ended;
    end loop;
end
$$;

-- The backstop (run by sweep_stuck): no job stays blocked after its parents ended. Parents that
-- ended without telling their children (a path that missed _settle_children) are settled now; a
-- child whose parent is gone (deleted) counts that parent as cancelled; a blocked job with nothing
-- left to wait for in a flow that is not paused is released. Reads only blocked jobs
-- (jobs_state_idx): nothing when no graph is blocked. Returns how many jobs it moved.
create or replace function "jobkit"._sweep_blocked() returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_moved int := 0;
    v_ids uuid[];
    r record;
begin
    if not exists (select 1 from "jobkit".jobs b where b.status = 'blocked') then
        return 0;
    end if;
    -- 1. parents that ended but never settled their children (by a stored edge, or a fan-in's)
    select pg_catalog.array_agg(distinct x.id) into v_ids
    from (select p.id, p.status, p.children_settled
          from "jobkit".jobs c
          join "jobkit".job_edges e on e.child_id = c.id
          join "jobkit".jobs p on p.id = e.parent_id
          where c.status = 'blocked'
          union all
          select p.id, p.status, p.children_settled
          from "jobkit".jobs c
          join "jobkit".flows g on g.id = c.flow_id and g.fan_in = c.id
          join "jobkit".jobs p on p.flow_id = g.id and p.created_at < c.created_at
          where c.status = 'blocked') x
    where x.children_settled is null and x.status in ('completed', 'failed', 'dead', 'cancelled');
    if v_ids is not null then
        perform "jobkit"._settle_children(v_ids);
    end if;
    -- 2. blocked jobs with nothing left to wait for, counted from their parents as they are now (a
    -- gone parent counts as cancelled). Only released, never held back more: a count that races
    -- with a completion is corrected by the completion itself.
    for r in
        with counted as (
            select c.id,
                   (pg_catalog.count(e.parent_id) filter (
                        where p.id is not null and (p.children_settled is null
                                                    or p.status not in ('completed', 'failed', 'dead', 'cancelled'))))::int
                       as open,
                   coalesce(pg_catalog.bool_or(p.id is null and e.on_parent_failure <> 'run'), false) as orphaned,
                   coalesce(pg_catalog.bool_or(f.paused_at is not null), false) as paused
            from "jobkit".jobs c
            left join lateral (
                select e.parent_id, e.on_parent_failure from "jobkit".job_edges e where e.child_id = c.id
                union all
                select p2.id, 'run' from "jobkit".flows g
                join "jobkit".jobs p2 on p2.flow_id = g.id and p2.created_at < c.created_at
                where g.id = c.flow_id and g.fan_in = c.id
            ) e on true
            left join "jobkit".jobs p on p.id = e.parent_id
            left join "jobkit".flows f on f.id = c.flow_id
            where c.status = 'blocked'
            group by c.id
        ), changed as (
            update "jobkit".jobs j
            set status = case when x.orphaned then 'cancelled' else 'pending' end,
                blocked_by = 0,
                scheduled_for = greatest(j.scheduled_for, pg_catalog.now()),
                completed_at = case when x.orphaned then pg_catalog.now() end,
                last_error = case when x.orphaned then 'a parent of this job was deleted' else j.last_error end,
                updated_at = pg_catalog.now()
            from counted x
            where j.id = x.id and j.status = 'blocked' and (x.orphaned or (x.open = 0 and not x.paused))
            returning j.id, j.status, j.type
        )
        select c.type, c.status, pg_catalog.array_agg(c.id) as ids, pg_catalog.count(*) as n
        from changed c group by c.type, c.status
    loop
        v_moved := v_moved + r.n::int;
        if r.status = 'pending' then
            perform "jobkit"._wake_for(r.type, r.n, null);
        else
            perform "jobkit"._notify_done(r.ids);
            perform "jobkit"._settle_children(r.ids);
        end if;
    end loop;
    return v_moved;
end
$$;

-- Cancel a flow: every job of it that has not ended (pending, blocked, waiting, processing) is
-- cancelled; a running attempt is told on its heartbeat (running_check) and its completion is
-- refused, as cancel_job. Returns how many jobs were cancelled.
create or replace function "jobkit".cancel_flow(p_flow uuid) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    with target as (
        select j.id, j.status as was from "jobkit".jobs j
        where j.flow_id = p_flow and j.status in ('pending', 'blocked', 'waiting', 'processing')
        order by j.id
        for update
    ), changed as (
        update "jobkit".jobs j
        set status = 'cancelled', completed_at = pg_catalog.now(), lease_expires_at = null,
            children_settled = true, updated_at = pg_catalog.now(),
            last_error = coalesce(j.last_error, 'its flow was cancelled')
        from target t
        where j.id = t.id
        returning j.id, j.attempts, j.worker_id, j.started_at, t.was
    ), history as (
        insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, c.attempts, c.worker_id, c.started_at, 'cancelled' from changed c
        where c.was = 'processing' and c.worker_id is not null and c.attempts > 0
    )
    select pg_catalog.array_agg(c.id) into v_ids from changed c;
    if v_ids is null then
        return 0;
    end if;
    delete from "jobkit".job_waits w where w.job_id = any (v_ids);  -- the waits of its waiting jobs
    perform "jobkit"._notify_done(v_ids);
    return pg_catalog.cardinality(v_ids);
end
$$;

-- Pause a flow: its pending jobs go back to blocked (with nothing left to wait for), and children
-- that become ready stay blocked until resume_flow; running and waiting jobs go on. Returns how many
-- pending jobs it held back, null when there is no such flow.
create or replace function "jobkit".pause_flow(p_flow uuid) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_n int;
begin
    update "jobkit".flows f set paused_at = coalesce(f.paused_at, pg_catalog.now()) where f.id = p_flow;
    if not found then
        return null;
    end if;
    with held as (
        update "jobkit".jobs j set status = 'blocked', blocked_by = 0, updated_at = pg_catalog.now()
        where j.flow_id = p_flow and j.status = 'pending'
        returning 1
    )
    select pg_catalog.count(*)::int into v_n from held;
    return v_n;
end
$$;

-- Resume a paused flow: its blocked jobs with no parent left to wait for are pending again and their
-- types are woken. Returns how many it released, null when there is no such flow.
create or replace function "jobkit".resume_flow(p_flow uuid) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_n int := 0;
    r record;
begin
    update "jobkit".flows f set paused_at = null where f.id = p_flow;
    if not found then
        return null;
    end if;
    for r in
        with released as (
            update "jobkit".jobs j
            set status = 'pending', scheduled_for = greatest(j.scheduled_for, pg_catalog.now()),
                updated_at = pg_catalog.now()
            where j.flow_id = p_flow and j.status = 'blocked' and coalesce(j.blocked_by, 0) = 0
            returning j.type
        )
        select x.type, pg_catalog.count(*) as n from released x group by x.type
    loop
        v_n := v_n + r.n::int;
        perform "jobkit"._wake_for(r.type, r.n, null);
    end loop;
    return v_n;
end
$$;

-- The parents of a job with what they ended with (ctx.parents): id, type, status, result, error and
-- the edge's policy, in the order the flow listed them (parents come before children). A fan-in's
-- parents (a gather's callback) are the jobs of its flow created before it, by 'run' edges.
create or replace function "jobkit".job_parents(p_id uuid)
returns table (id uuid, type text, status text, result jsonb, error text, on_parent_failure text)
language sql stable set search_path = '' as $$
    select p.id, p.type, p.status, p.result, p.last_error, e.on_parent_failure
    from (select e.parent_id, e.on_parent_failure from "jobkit".job_edges e where e.child_id = p_id
          union all  -- a fan-in's parents: the jobs of its flow created before it
          select p2.id, 'run' from "jobkit".jobs c
          join "jobkit".flows g on g.id = c.flow_id and g.fan_in = c.id
          join "jobkit".jobs p2 on p2.flow_id = g.id and p2.created_at < c.created_at
          where c.id = p_id) e
    join "jobkit".jobs p on p.id = e.parent_id
    order by p.created_at, p.id
$$;

-- What a producer waiting on a flow reads (jobkit.wait on a FlowRun, jobkit.wait_flow): the flow's
-- jobs in the order it gave them (a replayed job after them), each with its status, attempts and end
-- time; their results, last errors and progress only once every job of the flow ended (completed,
-- failed, dead or cancelled), so a poll while it runs reads no result. No row: no job has that
-- flow id (an unknown flow, or one whose jobs were pruned). Reads the flow's jobs by jobs_flow_state_idx.
create or replace function "jobkit".flow_state(p_flow uuid)
returns table (id uuid, status text, result jsonb, last_error text, attempts int, progress jsonb,
               completed_at timestamptz)
language plpgsql stable set search_path = '' as $$
begin
    if exists (select 1 from "jobkit".jobs j
               where j.flow_id = p_flow and j.status not in ('completed', 'failed', 'dead', 'cancelled')) then
        return query select j.id, j.status, null::jsonb, null::text, j.attempts, null::jsonb, j.completed_at
                     from "jobkit".jobs j where j.flow_id = p_flow order by j.created_at, j.id;
        return;
    end if;
    return query select j.id, j.status, j.result, j.last_error, j.attempts, j.progress, j.completed_at
                 from "jobkit".jobs j where j.flow_id = p_flow order by j.created_at, j.id;
end
$$;

-- Replay a job from one of its steps: a new pending job of the same type, payload and flow, whose
-- stored steps are copies of the completed steps the original started before the first occurrence of
-- p_step (so they return their stored results and do not run again); p_step and everything after
-- it run anew. The original is left as it is. Returns the new job's id.
create or replace function "jobkit".replay_job(p_id uuid, p_step text) returns uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_new uuid := pg_catalog.gen_random_uuid();
    v_from timestamptz;
begin
    if not exists (select 1 from "jobkit".jobs j where j.id = p_id) then
        raise exception 'jobkit.replay_job: no job %', p_id
            using errcode = 'P0002', hint = 'list jobs with `jobkit jobs list`';
    end if;
    select pg_catalog.min(t.started_at) into v_from
    from "jobkit".job_steps t where t.job_id = p_id and t.name = p_step;
    if v_from is null then
        raise exception 'jobkit.replay_job: job % has no step named %', p_id, p_step
            using errcode = '22023', hint = 'see its steps with `jobkit jobs show ID`';
    end if;
    insert into "jobkit".jobs (id, type, payload, priority, max_attempts, trace_context, concurrency_key, owner,
                              flow_id)
    select v_new, j.type, j.payload, j.priority, j.max_attempts, j.trace_context, j.concurrency_key, j.owner,
           j.flow_id
    from "jobkit".jobs j where j.id = p_id;
    insert into "jobkit".job_steps (job_id, name, occurrence, attempt, status, result, tries, started_at, finished_at)
    select v_new, t.name, t.occurrence, 0, 'completed', t.result, t.tries, t.started_at, t.finished_at
    from "jobkit".job_steps t
    where t.job_id = p_id and t.status = 'completed' and t.started_at < v_from;
    return v_new;
end
$$;

-- The public API: operators
-- sql/functions/50_operate.sql: retry, cancel, delete, pause and resume.
-- Applied in file-name order (after 40_finish.sql, before 60_sweeps.sql); sql/functions/README.md says how deploy applies these files.

-- Run a failed, dead or cancelled job again now with a fresh round of attempts, and wake the worker.
create or replace function "jobkit".retry_job(p_id uuid) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_type text;
begin
    update "jobkit".jobs j
    set status = 'pending', scheduled_for = now(), completed_at = null, lease_expires_at = null,
        round_start = j.attempts, updated_at = now()
    where j.id = p_id and j.status in ('failed', 'dead', 'cancelled')
    returning j.type into v_type;
    if v_type is null then
        return false;
    end if;
    perform "jobkit"._wake_for(v_type, 1, null);
    return true;
end
$$;

-- Cancel a pending, waiting, blocked or processing job. A running attempt may finish, but its result
-- is refused. A waiting job's wait is dropped. Waiters are notified. A job of a graph cancels its
-- blocked descendants (through 'fail' and 'cancel' edges; a 'run' child counts it as ended:
-- _settle_children).
create or replace function "jobkit".cancel_job(p_id uuid) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_flow uuid;
begin
    with target as (
        select j.id, j.status as was from "jobkit".jobs j
        where j.id = p_id and j.status in ('pending', 'processing', 'waiting', 'blocked')
        for update
    ), changed as (
        update "jobkit".jobs j
        set status = 'cancelled', completed_at = now(), lease_expires_at = null, updated_at = now()
        from target t
        where j.id = t.id
        returning j.id, j.attempts, j.worker_id, j.started_at, t.was, j.flow_id
    ), history as (
        -- the running attempt ends here; a pending job's last attempt was recorded when it ended
        insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, c.attempts, c.worker_id, c.started_at, 'cancelled' from changed c
        where c.was = 'processing' and c.worker_id is not null and c.attempts > 0
    )
    select c.id, c.flow_id into v_id, v_flow from changed c;
    if v_id is null then
        return false;
    end if;
    delete from "jobkit".job_waits w where w.job_id = v_id;
    perform "jobkit"._notify_done(array[v_id]);
    if v_flow is not null then
        perform "jobkit"._settle_children(array[v_id]);
    end if;
    return true;
end
$$;

-- Retry many jobs (retry_job for each): returns how many went back to pending. A job whose
-- idempotency key a newer unfinished job now holds stays where it is, and the rest still retry.
create or replace function "jobkit".retry_jobs(p_ids uuid[]) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_retried int := 0;
begin
    foreach v_id in array coalesce(p_ids, '{}') loop
        begin
            if "jobkit".retry_job(v_id) then
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
create or replace function "jobkit".cancel_jobs(p_ids uuid[]) returns int
language sql volatile set search_path = '' as $$
    select count(*) filter (where "jobkit".cancel_job(i))::int from unnest(p_ids) as i
$$;

-- Delete many jobs with their attempt history and steps: returns how many. A processing job is left alone
-- (cancel it first: its worker still holds it).
create or replace function "jobkit".delete_jobs(p_ids uuid[]) returns int
language sql volatile set search_path = '' as $$
    with gone as (
        delete from "jobkit".jobs j where j.id = any(p_ids) and j.status <> 'processing' returning j.id
    ), history as (
        delete from "jobkit".job_attempts a using gone g where a.job_id = g.id
    ), steps as (
        delete from "jobkit".job_steps t using gone g where t.job_id = g.id
    ), waits as (
        delete from "jobkit".job_waits w using gone g where w.job_id = g.id
    ), edges as (  -- its own edges in; a blocked child of a deleted parent: _sweep_blocked settles it
        delete from "jobkit".job_edges e using gone g where e.child_id = g.id
    )
    select count(*)::int from gone
$$;

-- Pause a type (p_key null) or one key of it: its jobs are not claimed and (for a type) not woken
-- for until resume_type. True when it was not paused yet.
create or replace function "jobkit".pause_type(p_type text, p_key text default null) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    if p_type is null or p_type = '' then
        raise exception 'jobkit.pause_type: p_type must be a non-empty job type' using errcode = '22023';
    end if;
    insert into "jobkit".pauses (type, key) values (p_type, p_key) on conflict do nothing;
    return found;
end
$$;

-- Resume a paused type or key and wake the workers for its due jobs. True when it was paused.
create or replace function "jobkit".resume_type(p_type text, p_key text default null) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    delete from "jobkit".pauses p where p.type = p_type and p.key is not distinct from p_key;
    if not found then
        return false;
    end if;
    perform "jobkit".wake(p_type);
    return true;
end
$$;

-- The public API: the built-in schedules
-- sql/functions/60_sweeps.sql: the stuck sweep, the dead sweep and pruning, which pg_cron runs.
-- Applied in file-name order (after 50_operate.sql, before 70_wake.sql); sql/functions/README.md says how deploy applies these files.

-- Processing jobs whose lease expired: back to pending with backoff while their round has attempts
-- left, else failed (and waiters are notified), so every job reaches a state. The worker is told
-- when the retries are due. It also sweeps the workers that stopped beating (sweep_workers,
-- 75_workers.sql).
create or replace function "jobkit".sweep_stuck() returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_statuses text[];
    v_types text[];
    v_due timestamptz[];
    v_parents uuid[];
    r record;
begin
    perform "jobkit".sweep_waits();  -- waits nothing resolved (a lost wake-up): 47_waits.sql
    perform "jobkit".sweep_workers();
    perform "jobkit".move_row_inbox();  -- row triggers' staged rows whose wake-up was lost (72_row_inbox.sql)
    with expired as (
        select e.id, "jobkit".attempt_limit(e.max_attempts, e.handler_max_attempts,
                                          coalesce(t.max_attempts, d.max_attempts)) as round_limit
        from "jobkit".jobs e
        cross join (select x.max_attempts from "jobkit".job_types x where x.type = '*') d
        left join "jobkit".job_types t on t.type = e.type
        where e.id = any (array(
            select l.id from "jobkit".jobs l
            where l.status = 'processing' and l.lease_expires_at < now()
            for update of l skip locked
        ))
    ), changed as (
        update "jobkit".jobs j
        set status = case when j.attempts - j.round_start < x.round_limit then 'pending' else 'failed' end,
            scheduled_for = case when j.attempts - j.round_start < x.round_limit
                then now() + "jobkit".backoff(j.type, j.attempts - j.round_start) else j.scheduled_for end,
            completed_at = case when j.attempts - j.round_start < x.round_limit then null else now() end,
            last_error = format('lease expired at %s (worker %s)', j.lease_expires_at, j.worker_id),
            lease_expires_at = null, updated_at = now()
        from expired x
        where j.id = x.id and j.status = 'processing' and j.lease_expires_at < now()
        returning j.id, j.status, j.type, j.scheduled_for, j.attempts, j.worker_id, j.started_at, j.last_error,
                  j.flow_id
    ), history as (
        insert into "jobkit".job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at, 'lease_expired', c.last_error from changed c
    )
    select array_agg(c.id), array_agg(c.status), array_agg(c.type), array_agg(c.scheduled_for),
           array_agg(c.id) filter (where c.flow_id is not null and c.status = 'failed')
    into v_ids, v_statuses, v_types, v_due, v_parents from changed c;
    if v_parents is not null then  -- failed jobs of a graph: their children's policies apply
        perform "jobkit"._settle_children(v_parents);
    end if;
    perform "jobkit"._sweep_blocked();  -- the backstop: no job stays blocked after its parents ended
    for r in select u.type, min(u.due) as due from unnest(v_types, v_due, v_statuses) as u(type, due, status)
             where u.status = 'pending' group by u.type loop
        perform "jobkit"._wake_for(r.type, 0, r.due);
    end loop;
    if 'failed' = any (v_statuses) then
        perform "jobkit"._notify_done(array(
            select u.id from unnest(v_ids, v_statuses) as u(id, status) where u.status = 'failed'));
    end if;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- Dead-letter failed jobs; returns how many moved.
create or replace function "jobkit".sweep_dead() returns bigint
language sql volatile set search_path = '' as $$
    with moved as (
        update "jobkit".jobs j set status = 'dead', updated_at = now()
        where j.id = any (array(
            select f.id from "jobkit".jobs f where f.status = 'failed' for update skip locked
        ))
          and j.status = 'failed'
        returning 1
    )
    select count(*) from moved
$$;

-- Delete finished jobs (completed, dead, cancelled) older than p_older_than, with their attempt
-- history, p_batch_size rows per statement; rows another session holds are skipped, never waited on.
-- Stops after p_max_batches. Returns the number of jobs deleted.
create or replace function "jobkit".prune(
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
    delete from "jobkit".enqueue_windows w where w.until < now() - p_older_than;
    delete from "jobkit".waiters w where w.expires_at < now();  -- waiters that gave up (0014)
    for i in 1 .. greatest(p_max_batches, 1) loop
        with gone as (
            delete from "jobkit".jobs j
            where j.id = any (array(
                select v.id from "jobkit".jobs v
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
        delete from "jobkit".job_attempts a where a.job_id = any (v_ids);
        delete from "jobkit".job_steps t where t.job_id = any (v_ids);
        delete from "jobkit".job_edges e where e.child_id = any (v_ids);
        v_total := v_total + cardinality(v_ids);
        exit when cardinality(v_ids) < p_batch_size;
    end loop;
    -- flows none of whose jobs is left (0020)
    delete from "jobkit".flows f
    where f.created_at < now() - p_older_than
      and not exists (select 1 from "jobkit".jobs j where j.flow_id = f.id);
    return v_total;
end
$$;

-- Delete wake records older than p_older_than; returns how many.
create or replace function "jobkit".prune_wakeups(p_older_than interval) returns bigint
language sql volatile set search_path = '' as $$
    with gone as (
        delete from "jobkit".wakeups w where w.created_at < now() - p_older_than returning 1
    )
    select count(*) from gone
$$;

-- The public API: wake-ups
-- sql/functions/70_wake.sql: waking workers (pg_net or NOTIFY), coalescing, the due-time queries, and the insert trigger.
-- Applied in file-name order (after 60_sweeps.sql, before 80_rate_limits.sql); sql/functions/README.md says how deploy applies these files.


-- Wake the worker for one type when it has runnable work: over pg_net, up to
-- ceil(backlog / batch_size) concurrent calls capped by p_max_calls (default: max_fanout); over
-- NOTIFY, one notification for the listening workers. Returns the number of calls made. It never
-- raises: a wake-up that cannot be sent is recorded as failed (and the cron backup tries again).
create or replace function "jobkit".wake(p_type text, p_max_calls int default null) returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_batch int := ("jobkit".setting('batch_size'))::int;
    v_cap int := greatest(coalesce(p_max_calls, ("jobkit".setting('max_fanout'))::int), 1);
    v_backlog bigint;
begin
    if exists (select 1 from "jobkit".pauses p where p.type = p_type and p.key is null) then
        return 0;
    end if;
    select count(*) into v_backlog from (
        select 1 from "jobkit".jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now()
        limit v_batch * v_cap
    ) due;
    if v_backlog = 0 then
        return 0;
    end if;
    return "jobkit"._send_wake(p_type, least(v_cap, ceil(v_backlog::numeric / v_batch)::int));
end
$$;

-- Wake every type with due work. The cron backup calls this; it first records the outcome of
-- earlier wake-ups.
create or replace function "jobkit".wake_all() returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_type text;
    v_calls int := 0;
begin
    perform "jobkit".reconcile_wakeups();
    for v_type in select p.t from "jobkit".pending_types() as p(t) loop
        v_calls := v_calls + "jobkit".wake(v_type);
    end loop;
    return v_calls;
end
$$;

-- Copy pg_net's answers into wakeups before pg_net's TTL deletes them. Returns rows settled.
create or replace function "jobkit".reconcile_wakeups(p_unanswered_after interval default '10 minutes')
returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_settled int := 0;
    v_late int;
begin
    if to_regclass('net._http_response') is not null then
        update "jobkit".wakeups w
        set outcome = case
                when coalesce(r.timed_out, false) or r.error_msg ilike 'timeout%' then 'timed_out'
                when r.error_msg is not null then 'failed'
                when r.status_code between 200 and 299 then 'delivered'
                else 'failed' end,
            status_code = r.status_code,
            error = coalesce(r.error_msg, case when r.status_code not between 200 and 299
                                               then left(r.content, 500) end),
            checked_at = now()
        from net._http_response r
        where w.outcome is null and w.request_id = r.id;
        get diagnostics v_settled = row_count;
    end if;
    update "jobkit".wakeups w
    set outcome = 'unanswered', checked_at = now(),
        error = 'no response from pg_net: the request is stuck in its queue or its answer expired'
    where w.outcome is null and w.created_at < now() - p_unanswered_after;
    get diagnostics v_late = row_count;
    return v_settled + v_late;
end
$$;

-- Accept a signed wake-up once across the whole fleet: true the first time its signature
-- is seen, false for any repeat (a replay read from pg_net's queue, pg_net's own later delivery,
-- another worker process, the same one after a restart). p_expires_at: when its window ends; the
-- row is kept 10 minutes longer (clock skew between workers and the database), and each call
-- deletes a few rows past that.
create or replace function "jobkit".consume_wake(p_nonce text, p_expires_at timestamptz) returns boolean
language sql volatile set search_path = '' as $$
    with expired as (
        delete from "jobkit".wake_nonces n
        where n.nonce = any (array(select e.nonce from "jobkit".wake_nonces e
                                   where e.expires_at < pg_catalog.now() - interval '10 minutes'
                                   order by e.expires_at limit 10))
    ), fresh as (
        insert into "jobkit".wake_nonces (nonce, expires_at) values (p_nonce, p_expires_at)
        on conflict (nonce) do nothing
        returning true as ok
    )
    select coalesce((select f.ok from fresh f), false)
$$;

-- A worker drains p_type: enqueues of the type send no wake-up for p_for, which the worker
-- refreshes while its drain runs (a worker that dies stops refreshing: wake-ups resume after p_for,
-- and the cron wake-up covers what was enqueued meanwhile).
create or replace function "jobkit".wake_draining(p_type text, p_for interval) returns void
language sql volatile set search_path = '' as $$
    insert into "jobkit".wake_drains as d (type, draining_until)
    values (p_type, pg_catalog.clock_timestamp() + p_for)
    on conflict (type) do update set draining_until = excluded.draining_until
$$;

-- A worker's drain of p_type ended. Only when no enqueue that skipped its wake-up relying on
-- a drain is still in flight (they hold the type's shared wake lock until they end): then enqueues
-- send wake-ups again, and the worker checks once more for due jobs (so the last skipped enqueue's
-- job is seen by that check or by a new wake-up). False: try again after another look for jobs.
-- p_handoff (the worker is stopping): mark idle in any case and wake another worker for what is due
-- (unconditionally when an enqueue is still in flight, since its job is not visible yet).
create or replace function "jobkit".wake_idle(p_type text, p_handoff boolean default false) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_free boolean := pg_catalog.pg_try_advisory_xact_lock(
        pg_catalog.hashtextextended('jobkit.wake:' || p_type, 0));
begin
    if not v_free and not p_handoff then
        return false;
    end if;
    insert into "jobkit".wake_drains as d (type, draining_until, idle_at)
    values (p_type, null, pg_catalog.clock_timestamp())
    on conflict (type) do update set draining_until = null, idle_at = excluded.idle_at;
    if p_handoff then
        if v_free then
            perform "jobkit".wake(p_type);
        else
            perform "jobkit"._send_wake(p_type, 1);
        end if;
    end if;
    return v_free;
end
$$;

-- When the next pending job of a type becomes due, or its next waiting job's wait ends (null: none), by a skip scan over the claim
-- index: one probe per distinct priority, however many jobs are pending.
create or replace function "jobkit".next_due(p_type text) returns timestamptz
language plpgsql stable set search_path = '' as $$
declare
    v_priority int;
    v_at timestamptz;
    v_best timestamptz;
begin
    if exists (select 1 from "jobkit".pauses p where p.type = p_type and p.key is null) then
        return null;  -- paused: nothing to wait for
    end if;
    if exists (select 1 from "jobkit".row_inbox i where i.type = p_type) then
        return now();  -- staged by a row trigger: the next claim moves it (72_row_inbox.sql)
    end if;
    select j.priority into v_priority from "jobkit".jobs j
    where j.type = p_type and j.status = 'pending' order by j.priority desc limit 1;
    while v_priority is not null loop
        select j.scheduled_for into v_at from "jobkit".jobs j
        where j.type = p_type and j.status = 'pending' and j.priority = v_priority
        order by j.scheduled_for limit 1;
        v_best := least(v_best, v_at);
        select j.priority into v_priority from "jobkit".jobs j
        where j.type = p_type and j.status = 'pending' and j.priority < v_priority
        order by j.priority desc limit 1;
    end loop;
    -- a waiting job's sleep end or timeout (47_waits.sql): the worker's timer claims it then
    return least(v_best, (select min(w.due) from "jobkit".job_waits w
                         where w.type = p_type and w.due is not null));
end
$$;

-- Every type that has pending jobs, by a skip scan over jobs_claim_idx (one index probe per type,
-- however many jobs are pending).
create or replace function "jobkit".pending_types() returns setof text
language sql stable set search_path = '' as $$
    with recursive t(type) as (
        (select j.type from "jobkit".jobs j where j.status = 'pending' order by j.type limit 1)
        union all
        select (select j.type from "jobkit".jobs j
                where j.status = 'pending' and j.type > t.type order by j.type limit 1)
        from t where t.type is not null
    )
    select t.type from t
    where t.type is not null
      and not exists (select 1 from "jobkit".pauses p where p.type = t.type and p.key is null)
$$;

-- Due jobs of a type (bounded), for a worker deciding whether to wait for rate-limit tokens.
create or replace function "jobkit".due_count(p_type text, p_cap int default 1000) returns int
language sql stable set search_path = '' as $$
    select count(*)::int from (
        select 1 from "jobkit".jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now()
          and not exists (select 1 from "jobkit".pauses p where p.type = p_type and p.key is null)
        limit p_cap
    ) due
$$;

-- Wake the worker for jobs this transaction made runnable: p_due jobs due now, or (when none is
-- due) the earliest time p_at at which one becomes due. What was already sent in this transaction
-- is remembered in a transaction-local setting, so however many enqueue calls or statements a
-- transaction makes, it sends one wake-up per type, plus one more per batch_size due jobs up to
-- max_fanout, plus a due-time hint only when it is earlier than the one already sent. Across
-- transactions, the first due-now wake-up of a transaction is sent only when sql/shared/wake.sql's
-- wake_needed says so (0010: none while a worker drains the type, at most one a second otherwise).
-- Issue 23, what it costs: the record, a jsonb object {type: [calls, rows, at, batch, fanout]},
-- keeps the settings the transaction read, so a later call that sends nothing reads no table; the
-- first call writes it without parsing any jsonb. A first due-now wake-up asks wake_needed before
-- anything else, so an enqueue that a drain or a recent wake-up covers reads neither job_types nor
-- pauses. wake_needed and wake_on are inlined (stop 33: they were functions of their own, each
-- call with its `set search_path` more than their work), and jobs_wake_on_insert inlines this
-- function's first path for a single enqueue. Calls are plain assignments where they can be: a
-- `perform` is a query, an assignment of a simple expression is not.
create or replace function "jobkit"._wake_for(p_type text, p_due bigint, p_at timestamptz) returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_memo text := pg_catalog.current_setting('jobkit.wakes', true);
    v_mine jsonb;
    v_calls int;
    v_rows bigint;
    v_at timestamptz;
    v_batch int;
    v_fanout int;
    v_want int;
    v_send boolean;
    v_void text;
begin
    -- The commonest call (a single enqueue): one due job, nothing recorded yet in this transaction.
    -- What the general path below would do, in four expressions instead of twelve (each plpgsql
    -- expression is prepared again in every transaction: about 5,000 instructions).
    if p_due = 1 and coalesce(v_memo, '') = '' then
        <<first>>
        declare
            v_wn_draining timestamptz;
            v_wn_idle timestamptz;
            v_wn_sent timestamptz;
            v_wn_lock text;  -- the lock's void result: an assignment is a simple expression, a perform is a query
        begin
            if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
                v_send := case when (not exists (select from "jobkit".pauses p where p.type = p_type and p.key is null)
                 and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = p_type),
                              (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then true end;
                exit first;
            end if;
            v_wn_lock := pg_catalog.pg_advisory_xact_lock_shared(
                pg_catalog.hashtextextended('jobkit.wake:' || p_type, 0));
            select d.draining_until, d.idle_at into v_wn_draining, v_wn_idle
            from "jobkit".wake_drains d where d.type = p_type;
            if v_wn_draining > pg_catalog.clock_timestamp() then
                v_send := false;
                exit first;
            end if;
            select w.sent_at into v_wn_sent from "jobkit".wake_sent w where w.type = p_type;
            if v_wn_sent > pg_catalog.clock_timestamp() - interval '1 second'
               and v_wn_sent > coalesce(v_wn_idle, '-infinity'::timestamptz) then
                v_send := false;
                exit first;
            end if;
            if not (not exists (select from "jobkit".pauses p where p.type = p_type and p.key is null)
                 and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = p_type),
                              (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then
                v_send := null;
                exit first;
            end if;
            if pg_catalog.pg_try_advisory_xact_lock(
                   pg_catalog.hashtextextended('jobkit.wake_sent:' || p_type, 0)) then
                insert into "jobkit".wake_sent as w (type, sent_at) values (p_type, pg_catalog.clock_timestamp())
                on conflict (type) do update set sent_at = excluded.sent_at;
            end if;
            v_send := true;
        end first;
        if v_send then
            v_void := "jobkit"._send_wake(p_type, 1);
        end if;
        v_void := pg_catalog.set_config('jobkit.wakes', case when v_send is not null
            then '{' || pg_catalog.to_json(p_type)::text || ':[1,1,null,null,null]}' else '' end, true);
        return;
    end if;
    v_calls := 0;
    v_rows := coalesce(p_due, 0);
    v_want := 1;
    if v_memo <> '' then  -- null or '': nothing recorded in this transaction
        v_mine := v_memo::jsonb -> p_type;
        if v_mine is not null then
            v_calls := (v_mine ->> 0)::int;
            v_rows := v_rows + (v_mine ->> 1)::bigint;
            v_at := (v_mine ->> 2)::timestamptz;
            v_batch := (v_mine ->> 3)::int;
            v_fanout := (v_mine ->> 4)::int;
            -- the fast path: the type was woken in this transaction and nothing more is to be sent
            if v_rows > 0 and (v_calls >= v_fanout or v_rows <= v_calls::bigint * v_batch) then
                v_void := pg_catalog.set_config('jobkit.wakes', pg_catalog.jsonb_set(
                    v_memo::jsonb, array[p_type],
                    pg_catalog.jsonb_set(v_mine, '{1}', pg_catalog.to_jsonb(v_rows)))::text, true);
                return;
            elsif v_rows = 0 and (p_at is null or p_at >= v_at) then
                return;
            end if;
        end if;
    end if;
    if v_rows > 1 and v_batch is null then  -- one due job wants one call: no settings to read
        select greatest((select (x.value)::int from "jobkit".settings x where x.key = 'max_fanout'), 1),
               greatest((select (x.value)::int from "jobkit".settings x where x.key = 'batch_size'), 1)
        into v_fanout, v_batch;
    end if;
    if v_rows > 1 then
        v_want := least(v_fanout, pg_catalog.ceil(v_rows::numeric / v_batch)::int);
    end if;
    if v_rows > 0 and v_calls = 0 then
        -- the first due-now wake-up: wake_needed says null for a type not to be woken
        <<needed>>
        declare
            v_wn_draining timestamptz;
            v_wn_idle timestamptz;
            v_wn_sent timestamptz;
            v_wn_lock text;  -- the lock's void result: an assignment is a simple expression, a perform is a query
        begin
            if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
                v_send := case when (not exists (select from "jobkit".pauses p where p.type = p_type and p.key is null)
                 and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = p_type),
                              (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then true end;
                exit needed;
            end if;
            v_wn_lock := pg_catalog.pg_advisory_xact_lock_shared(
                pg_catalog.hashtextextended('jobkit.wake:' || p_type, 0));
            select d.draining_until, d.idle_at into v_wn_draining, v_wn_idle
            from "jobkit".wake_drains d where d.type = p_type;
            if v_wn_draining > pg_catalog.clock_timestamp() then
                v_send := false;
                exit needed;
            end if;
            select w.sent_at into v_wn_sent from "jobkit".wake_sent w where w.type = p_type;
            if v_wn_sent > pg_catalog.clock_timestamp() - interval '1 second'
               and v_wn_sent > coalesce(v_wn_idle, '-infinity'::timestamptz) then
                v_send := false;
                exit needed;
            end if;
            if not (not exists (select from "jobkit".pauses p where p.type = p_type and p.key is null)
                 and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = p_type),
                              (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then
                v_send := null;
                exit needed;
            end if;
            if pg_catalog.pg_try_advisory_xact_lock(
                   pg_catalog.hashtextextended('jobkit.wake_sent:' || p_type, 0)) then
                insert into "jobkit".wake_sent as w (type, sent_at) values (p_type, pg_catalog.clock_timestamp())
                on conflict (type) do update set sent_at = excluded.sent_at;
            end if;
            v_send := true;
        end needed;
        if v_send is null then
            return;
        elsif v_send then
            v_void := "jobkit"._send_wake(p_type, v_want);
        end if;
        v_calls := v_want;
    elsif (v_rows > 0 and v_want > v_calls)
          or (v_rows = 0 and p_at is not null and (v_at is null or p_at < v_at)) then
        if not (not exists (select from "jobkit".pauses p where p.type = p_type and p.key is null)
                and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = p_type),
                             (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then
            return;
        end if;
        if v_rows > 0 then
            v_void := "jobkit"._send_wake(p_type, v_want - v_calls);
            v_calls := v_want;
        else
            v_void := "jobkit"._send_wake(p_type, 1, p_at);
            v_at := p_at;
        end if;
    end if;
    if coalesce(v_memo, '') = '' then
        -- the transaction's first record: written as text, no jsonb to parse or build
        v_void := pg_catalog.set_config('jobkit.wakes',
            '{' || pg_catalog.to_json(p_type)::text || ':[' || v_calls::text || ',' || v_rows::text
            || ',' || coalesce(pg_catalog.to_json(v_at)::text, 'null') || ',' || coalesce(v_batch::text, 'null')
            || ',' || coalesce(v_fanout::text, 'null') || ']}', true);
    else
        v_void := pg_catalog.set_config('jobkit.wakes', pg_catalog.jsonb_set(
            coalesce(nullif(v_memo, ''), '{}')::jsonb, array[p_type],
            pg_catalog.jsonb_build_array(v_calls, v_rows, v_at, v_batch, v_fanout))::text, true);
    end if;
end
$$;

-- Send p_calls wake-ups (p_at: the time the type's next job becomes due) over the configured transport.
create or replace function "jobkit"._send_wake(p_type text, p_calls int, p_at timestamptz default null) returns int
language plpgsql volatile security definer set search_path = '' as $$
begin
    if ("jobkit".setting('transport')) #>> '{}' = 'pg_net' then
        return "jobkit"._wake_http(p_type, p_calls, p_at);
    end if;
    -- NOTIFY has no answer to reconcile, so it is not recorded in wakeups; it is delivered at
    -- commit, and duplicates within a transaction fold into one.
    perform pg_notify(("jobkit".setting('channel')) #>> '{}',
                      case when p_at is null then json_build_object('type', p_type, 'calls', p_calls)
                           else json_build_object('type', p_type, 'at', extract(epoch from p_at)) end::text);
    return 1;
end
$$;

-- Send p_calls signed wake-ups over pg_net: X-Jobkit-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256
-- of "<t>.<body>"> with the worker's secret, so that a request read from pg_net's queue (readable by
-- every role) cannot call the worker after a short window. Each request gets its own nonce.
create or replace function "jobkit"._wake_http(p_type text, p_calls int, p_at timestamptz default null)
returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_url text := "jobkit".secret('worker_url');
    v_secret text := "jobkit".secret('worker_secret');
    v_body jsonb;
    v_t text;
    v_request bigint;
begin
    if v_url is null or v_secret is null then
        insert into "jobkit".wakeups (type, transport, outcome, error, checked_at)
        values (p_type, 'pg_net', 'failed', 'worker URL or secret not set: run `jobkit secrets set`', now());
        return 0;
    end if;
    v_t := floor(extract(epoch from clock_timestamp()))::bigint::text;
    for i in 1 .. p_calls loop
        v_body := jsonb_build_object('type', p_type, 'budget_ms', ("jobkit".setting('budget_ms'))::int,
                                     'nonce', gen_random_uuid());
        if p_at is not null then
            v_body := v_body || jsonb_build_object('at', extract(epoch from p_at));
        end if;
        v_request := net.http_post(
            url := v_url,
            body := v_body,
            params := '{}'::jsonb,
            headers := jsonb_build_object(
                'Content-Type', 'application/json',
                'X-Jobkit-Signature', 't=' || v_t || ',v1=' || encode("jobkit"._hmac(
                    convert_to(v_secret, 'UTF8'), convert_to(v_t || '.' || v_body::text, 'UTF8')), 'hex')),
            timeout_milliseconds := ("jobkit".setting('wake_timeout_ms'))::int
        );
        insert into "jobkit".wakeups (type, transport, request_id) values (p_type, 'pg_net', v_request);
    end loop;
    return p_calls;
exception when others then
    -- pg_net missing or refusing: record it, never break the caller (an enqueue, a cron tick).
    insert into "jobkit".wakeups (type, transport, outcome, error, checked_at)
    values (p_type, 'pg_net', 'failed', sqlerrm, now());
    return 0;
end
$$;

-- The insert trigger: per statement, per type, the due rows and the earliest future one. One
-- statement, not a cursor loop over them (issue 23: the loop cost 13,000 instructions an enqueue).
-- Issue 23: a statement of one pending row (a single enqueue) reads it with a LIMIT query; when it
-- is due and its transaction has recorded no wake-up yet (the commonest case), _wake_for's first
-- path runs here, inlined (sql/shared/wake.sql: no plpgsql call), else _wake_for is called as an
-- expression; only a statement of several rows pays for the aggregate (a hash aggregate's set-up
-- alone was 30,000 instructions, spread over a bulk statement's rows). Issue 23 (stop 33): the
-- commonest bulk statement has one type; a plain aggregate (and one comparison a row with the
-- first row's type) serves it, the grouped one only runs when the types differ.
create or replace function "jobkit".jobs_wake_on_insert() returns trigger
language plpgsql security definer set search_path = '' as $$
declare
    v_type text;
    v_at timestamptz;
    v_more boolean;
    v_send boolean;
    v_void text;
    v_due bigint;
    v_same boolean;
begin
    select n.type, n.scheduled_for, exists (select from new_jobs m where m.status = 'pending' offset 1)
    into v_type, v_at, v_more from new_jobs n where n.status = 'pending' limit 1;
    if not v_more then  -- one pending row (no row: v_more is null)
        if v_at <= pg_catalog.now()
           and coalesce(pg_catalog.current_setting('jobkit.wakes', true), '') = '' then
            <<first>>
            declare
                v_wn_draining timestamptz;
                v_wn_idle timestamptz;
                v_wn_sent timestamptz;
                v_wn_lock text;  -- the lock's void result: an assignment is a simple expression, a perform is a query
            begin
                if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
                    v_send := case when (not exists (select from "jobkit".pauses p where p.type = v_type and p.key is null)
                     and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = v_type),
                                  (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then true end;
                    exit first;
                end if;
                v_wn_lock := pg_catalog.pg_advisory_xact_lock_shared(
                    pg_catalog.hashtextextended('jobkit.wake:' || v_type, 0));
                select d.draining_until, d.idle_at into v_wn_draining, v_wn_idle
                from "jobkit".wake_drains d where d.type = v_type;
                if v_wn_draining > pg_catalog.clock_timestamp() then
                    v_send := false;
                    exit first;
                end if;
                select w.sent_at into v_wn_sent from "jobkit".wake_sent w where w.type = v_type;
                if v_wn_sent > pg_catalog.clock_timestamp() - interval '1 second'
                   and v_wn_sent > coalesce(v_wn_idle, '-infinity'::timestamptz) then
                    v_send := false;
                    exit first;
                end if;
                if not (not exists (select from "jobkit".pauses p where p.type = v_type and p.key is null)
                     and coalesce((select t.wake_on_insert from "jobkit".job_types t where t.type = v_type),
                                  (select t.wake_on_insert from "jobkit".job_types t where t.type = '*'), true)) then
                    v_send := null;
                    exit first;
                end if;
                if pg_catalog.pg_try_advisory_xact_lock(
                       pg_catalog.hashtextextended('jobkit.wake_sent:' || v_type, 0)) then
                    insert into "jobkit".wake_sent as w (type, sent_at) values (v_type, pg_catalog.clock_timestamp())
                    on conflict (type) do update set sent_at = excluded.sent_at;
                end if;
                v_send := true;
            end first;
            if v_send then
                v_void := "jobkit"._send_wake(v_type, 1);
            end if;
            v_void := pg_catalog.set_config('jobkit.wakes', case when v_send is not null
                then '{' || pg_catalog.to_json(v_type)::text || ':[1,1,null,null,null]}' else '' end, true);
        else
            v_void := "jobkit"._wake_for(v_type, (v_at <= pg_catalog.now())::int,
                                        case when v_at > pg_catalog.now() then v_at end);
        end if;
    elsif v_more then  -- several: one plain aggregate; grouped by type only when types differ
        select count(*) filter (where n.scheduled_for <= pg_catalog.now()),
               min(n.scheduled_for) filter (where n.scheduled_for > pg_catalog.now()),
               bool_and(n.type operator(pg_catalog.=) v_type)
        into v_due, v_at, v_same from new_jobs n where n.status = 'pending';
        if v_same then
            v_void := "jobkit"._wake_for(v_type, v_due, v_at);
        else
            perform "jobkit"._wake_for(n.type, n.due, n.at)
            from (select n.type, count(*) filter (where n.scheduled_for <= pg_catalog.now()) as due,
                         min(n.scheduled_for) filter (where n.scheduled_for > pg_catalog.now()) as at
                  from new_jobs n where n.status = 'pending' group by n.type) n;
        end if;
    end if;
    return null;
end
$$;

create or replace trigger jobs_wake_on_insert after insert on "jobkit".jobs
    referencing new table as new_jobs
    for each statement execute function "jobkit".jobs_wake_on_insert();

-- The public API: the declared row triggers' inbox
-- sql/functions/72_row_inbox.sql: move_row_inbox, which makes the rows declared row triggers staged (0026) into jobs.
-- Applied in file-name order (after 70_wake.sql, before 75_workers.sql); sql/functions/README.md says how deploy applies these files.

-- A declared row trigger ([triggers.<name>], sql/row_trigger.sql) writes one row per changed row into
-- row_inbox, in the changing transaction, and wakes the type's worker once per statement. Here those
-- rows become jobs, off that transaction: up to p_limit staged rows (null: all) of p_type (null:
-- every type; p_trigger: only that trigger's) are deleted and inserted into jobs in one statement.
-- A staged row is one json array of the payload's and the primary key's columns, in the order
-- staged() in sql/row_trigger.sql writes them (past 100 columns, and before stop 33: one object of
-- the same values keyed f1, f2, ...; the row itself for payload "row"); its
-- trigger's row_triggers.spec (its payload, its primary key's columns), read once per trigger, names
-- them and takes them apart into the job's payload and its source (trigger, table, operation,
-- primary key). For a trigger declared with idempotency =
-- "pk" the job's key is "<trigger>:<primary key>": one unfinished job per row and trigger (a row
-- staged again while its job is pending or processing makes no second job). Staged rows another
-- mover holds are skipped (SKIP LOCKED), so concurrent movers never move a row twice, and the jobs
-- are inserted in key order, so that two movers that meet on keys wait for each other in one order
-- and never deadlock. A rolled-back move leaves its rows staged. The insert fires
-- jobs_wake_on_insert as any enqueue does. Called by claim_jobs for a type that has row triggers
-- (30_claim.sql), by sweep_stuck for every type (60_sweeps.sql: the backstop for a lost wake-up), and
-- by deploy before it removes a trigger. Returns how many staged rows it moved.
create or replace function "jobkit".move_row_inbox(p_type text default null, p_limit int default null,
                                                  p_trigger text default null)
returns int
language sql volatile set search_path = '' as $$
    with staged as (
        delete from "jobkit".row_inbox i
        where i.ctid = any (array(
            select x.ctid from "jobkit".row_inbox x
            where (p_type is null or x.type = p_type) and (p_trigger is null or x.name = p_trigger)
            limit p_limit
            for update skip locked
        ))
        returning i.ctid as id, i.name, i.op, i.type, i.staged::jsonb as staged, i.staged_at
    ), specs as (  -- per trigger, once: how its staged object splits into payload and primary key
        select g.name, g.op, g.table_name, g.spec ->> 'idempotency' = 'pk' as keyed,
               g.spec ->> 'payload' = 'row' as whole, g.spec -> 'pk' as pk,
               -- the staged array's elements (or object's keys f1, f2, ...) are these columns (staged())
               case when g.spec ->> 'payload' = 'row' then null else array(
                   select c.k from (
                       select p.k, p.n from jsonb_array_elements_text(
                           case when jsonb_typeof(g.spec -> 'payload') = 'array' then g.spec -> 'payload'
                                else '[]' end) with ordinality p(k, n)
                       union all
                       select p.k, 1000 + p.n from jsonb_array_elements_text(g.spec -> 'pk') with ordinality p(k, n)
                       where not (case when jsonb_typeof(g.spec -> 'payload') = 'array' then g.spec -> 'payload'
                                       else '[]' end) ? p.k
                   ) c order by c.n) end as names,
               case when jsonb_typeof(g.spec -> 'payload') = 'array' then array(
                   select k from jsonb_array_elements_text(g.spec -> 'pk') k
                   where not (g.spec -> 'payload') ? k)
               else '{}' end as not_payload,
               case when jsonb_typeof(g.spec -> 'payload') = 'array' then array(
                   select k from jsonb_array_elements_text(g.spec -> 'payload') k
                   where not (g.spec -> 'pk') ? k)
               else '{}' end as not_pk
        from "jobkit".row_triggers g
        where g.name in (select distinct x.name from staged x)
    ), renamed as (  -- named in one aggregate over the batch (a subquery a row: +29 k Ir a row)
        select x.id, jsonb_object_agg(n.k, case when jsonb_typeof(x.staged) = 'array' then x.staged -> (n.i::int - 1)
                                                else x.staged -> ('f' || n.i) end) as staged
        from staged x
        join specs g on g.name = x.name and g.op = x.op
        cross join lateral unnest(g.names) with ordinality n(k, i)
        group by x.id
    ), named as (
        select x.type, x.name, x.op, x.staged_at, g.table_name, g.keyed, g.whole, g.pk, g.not_payload, g.not_pk,
               coalesce(m.staged, x.staged) as staged  -- payload "row" (or no spec, never kept): as staged
        from staged x
        left join specs g on g.name = x.name and g.op = x.op
        left join renamed m on m.id = x.id
    ), split as (
        select x.type, x.name, x.op, x.staged_at, x.table_name, x.keyed,
               x.staged - coalesce(x.not_payload, '{}') as payload,
               case when x.whole
                    then (select jsonb_object_agg(k, x.staged -> k) from jsonb_array_elements_text(x.pk) k)
                    else x.staged - x.not_pk end as pk
        from named x
    ), shaped as (
        select x.type, x.staged_at, x.payload,
               jsonb_build_object('trigger', x.name, 'table', x.table_name, 'op', x.op, 'pk', x.pk) as source,
               case when x.keyed then x.name || ':' || x.pk::text end as idempotency_key
        from split x
    ), made as (
        insert into "jobkit".jobs (type, payload, idempotency_key, concurrency_key, source, created_at)
        select x.type, x.payload, x.idempotency_key,
               coalesce(case when t.key_template is not null then "jobkit"._render_key(t.key_template, x.payload) end,
                        case when t.fair then '' end),
               x.source, x.staged_at
        from shaped x
        left join "jobkit".job_types t on t.type = x.type
        order by x.type, x.idempotency_key
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
    )
    select count(*)::int from staged
$$;

-- The public API: live workers
-- sql/functions/75_workers.sql: worker presence (0021): the heartbeat upsert, the clean shutdown's mark, the sweep of workers that stopped beating, and each worker's state.
-- Applied in file-name order (after 72_row_inbox.sql, before 80_rate_limits.sql); sql/functions/README.md says how deploy applies these files.

-- A worker's state: 'gone' once its shutdown or the sweep marked it, 'stale' once it has missed
-- three heartbeats (at least 10 seconds), else 'alive'.
create or replace function "jobkit".worker_state(p_last_seen timestamptz, p_heartbeat interval, p_gone_at timestamptz)
returns text language sql stable set search_path = '' as $$
    select case
        when p_gone_at is not null then 'gone'
        when p_last_seen < pg_catalog.now() - greatest(p_heartbeat * 3, interval '10 seconds') then 'stale'
        else 'alive'
    end
$$;

-- A worker's heartbeat: one upsert of its own row (registering it on the first beat, and again
-- after the sweep marked it gone while the database was out of its reach).
create or replace function "jobkit".worker_beat(
    p_id text, p_host text, p_pid int, p_version text, p_transport text, p_concurrency int,
    p_types text[], p_running int, p_heartbeat interval, p_started_at timestamptz
) returns void
language sql volatile set search_path = '' as $$
    insert into "jobkit".workers as w (id, host, pid, version, transport, concurrency, types, running,
                                      heartbeat, started_at, last_seen)
    values (p_id, p_host, p_pid, p_version, p_transport, p_concurrency, coalesce(p_types, '{}'),
            greatest(p_running, 0), p_heartbeat, p_started_at, pg_catalog.now())
    on conflict (id) do update
    set running = excluded.running, last_seen = excluded.last_seen, types = excluded.types,
        concurrency = excluded.concurrency, heartbeat = excluded.heartbeat, gone_at = null,
        gone_reason = null
$$;

-- A worker's clean shutdown: its row is marked gone (the sweep deletes it an hour later).
create or replace function "jobkit".worker_gone(p_id text) returns void
language sql volatile set search_path = '' as $$
    update "jobkit".workers w
    set gone_at = pg_catalog.now(), gone_reason = 'stopped', running = 0
    where w.id = p_id and w.gone_at is null
$$;

-- Mark gone the workers that missed their heartbeats; delete the rows gone for an hour. Run by
-- sweep_stuck (every minute by default). Returns how many it marked.
create or replace function "jobkit".sweep_workers() returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_marked int;
begin
    update "jobkit".workers w
    set gone_at = pg_catalog.now(), gone_reason = 'missed heartbeats'
    where w.gone_at is null and "jobkit".worker_state(w.last_seen, w.heartbeat, w.gone_at) = 'stale';
    get diagnostics v_marked = row_count;
    delete from "jobkit".workers w where w.gone_at < pg_catalog.now() - interval '1 hour';
    return v_marked;
end
$$;

-- Every worker with its state, for the dashboard, `jobkit status`, doctor and /metrics.
create or replace function "jobkit".workers_now() returns table (
    id text, host text, pid int, version text, transport text, concurrency int, types text[], running int,
    heartbeat interval, started_at timestamptz, last_seen timestamptz, gone_at timestamptz,
    gone_reason text, state text
)
language sql stable set search_path = '' as $$
    select w.id, w.host, w.pid, w.version, w.transport, w.concurrency, w.types, w.running, w.heartbeat,
           w.started_at, w.last_seen, w.gone_at, w.gone_reason,
           "jobkit".worker_state(w.last_seen, w.heartbeat, w.gone_at)
    from "jobkit".workers w
$$;

-- The public API: rate limits shared by every worker
-- sql/functions/80_rate_limits.sql: the token buckets.
-- Applied in file-name order (after 70_wake.sql, before 85_secrets.sql); sql/functions/README.md says how deploy applies these files.

-- Take up to p_want tokens from p_key's bucket now; returns how many were granted (0 .. p_want).
-- An unknown key grants everything (no limit configured).
create or replace function "jobkit".take_tokens(p_key text, p_want int) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_bucket "jobkit".rate_limits;
    v_now timestamptz;
    v_available float8;
    v_granted int;
begin
    if p_key is null or p_want <= 0 then
        return greatest(p_want, 0);
    end if;
    select * into v_bucket from "jobkit".rate_limits r where r.key = p_key for update;
    if not found then
        return p_want;
    end if;
    v_now := clock_timestamp();
    v_available := least(v_bucket.burst::float8,
                         v_bucket.tokens + v_bucket.rate * extract(epoch from v_now - v_bucket.updated_at));
    v_granted := least(p_want, floor(v_available)::int);
    update "jobkit".rate_limits r set tokens = v_available - v_granted, updated_at = v_now
    where r.key = p_key;
    return v_granted;
end
$$;

-- Give back tokens taken but not used (a claim found fewer jobs than it had tokens for).
create or replace function "jobkit".return_tokens(p_key text, p_count int) returns void
language sql volatile set search_path = '' as $$
    update "jobkit".rate_limits r set tokens = least(r.burst::float8, r.tokens + p_count)
    where r.key = p_key and p_count > 0
$$;

-- How long until p_key's bucket holds one token (zero when it does, or when there is no limit).
create or replace function "jobkit".token_wait(p_key text) returns interval
language sql stable set search_path = '' as $$
    select coalesce((
        select make_interval(secs => greatest(0, (1 - least(r.burst::float8,
                   r.tokens + r.rate * extract(epoch from clock_timestamp() - r.updated_at))) / r.rate))
        from "jobkit".rate_limits r where r.key = p_key
    ), interval '0')
$$;

-- The public API: the worker's URL and signing secret, runtime settings
-- sql/functions/85_secrets.sql: settings, secrets (Vault when present), and signing.
-- Applied in file-name order (after 80_rate_limits.sql, before 90_views.sql); sql/functions/README.md says how deploy applies these files.

-- A setting's value.
create or replace function "jobkit".setting(p_key text) returns jsonb
language sql stable set search_path = '' as $$
    select value from "jobkit".settings where key = p_key
$$;

-- A secret by jobkit name ('worker_url', 'worker_secret'): Vault's '<schema>_<name>' when Vault is
-- installed, else the private table. Never logged, never part of any cron command.
create or replace function "jobkit".secret(p_name text) returns text
language plpgsql stable security definer set search_path = '' as $$
declare
    v_value text;
begin
    if to_regclass('vault.decrypted_secrets') is not null then
        select d.decrypted_secret into v_value from vault.decrypted_secrets d
        where d.name = 'jobkit' || '_' || p_name;
        if v_value is not null then
            return v_value;
        end if;
    end if;
    select s.value into v_value from "jobkit".secrets s where s.name = p_name;
    return v_value;
end
$$;

-- Replace the signing secret; the previous one stays valid for p_grace, so running workers see no
-- failed wake-up while they pick up the new one.
create or replace function "jobkit".set_worker_secret(p_secret text, p_grace interval default '10 minutes') returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_old text := "jobkit".secret('worker_secret');
begin
    if p_secret is null or length(p_secret) < 32 then
        raise exception 'jobkit.set_worker_secret: the secret must have at least 32 characters'
            using errcode = '22023';
    end if;
    if v_old is not null and v_old <> p_secret then
        perform "jobkit"._put_secret('worker_secret_previous', v_old);
        update "jobkit".settings
        set value = to_jsonb(now() + greatest(coalesce(p_grace, interval '0'), interval '0')), updated_at = now()
        where key = 'secret_previous_until';
    end if;
    perform "jobkit"._put_secret('worker_secret', p_secret);
end
$$;

-- A new signing secret generated here, so it never travels as a statement parameter: 366 random
-- bits from gen_random_uuid()'s strong random source.
create or replace function "jobkit".rotate_worker_secret(p_grace interval default '10 minutes') returns void
language sql volatile security definer set search_path = '' as $$
    select "jobkit".set_worker_secret(encode(
        uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex'),
        p_grace)
$$;

-- What a worker verifies signatures with: the current secret and, during a rotation's grace
-- period, the previous one.
create or replace function "jobkit".worker_keys() returns table (current_secret text, previous_secret text)
language sql stable security definer set search_path = '' as $$
    select "jobkit".secret('worker_secret'),
           case when ("jobkit".setting('secret_previous_until') #>> '{}')::timestamptz > now()
                then "jobkit".secret('worker_secret_previous') end
$$;

-- HMAC-SHA256 (RFC 2104) with the built-in sha256(): no extension needed.
create or replace function "jobkit"._hmac(p_key bytea, p_message bytea) returns bytea
language plpgsql immutable strict set search_path = '' as $$
declare
    v_key bytea := p_key;
    v_inner bytea;
    v_outer bytea;
begin
    if length(v_key) > 64 then
        v_key := sha256(v_key);
    end if;
    v_key := v_key || decode(repeat('00', 64 - length(v_key)), 'hex');
    v_inner := v_key;
    v_outer := v_key;
    for i in 0 .. 63 loop
        v_inner := set_byte(v_inner, i, get_byte(v_key, i) # 54);   -- 0x36
        v_outer := set_byte(v_outer, i, get_byte(v_key, i) # 92);   -- 0x5c
    end loop;
    return sha256(v_outer || sha256(v_inner || p_message));
end
$$;

-- Store a secret: Vault's '<schema>_<name>' when Vault is installed, else the private table.
create or replace function "jobkit"._put_secret(p_name text, p_value text) returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_vault_name text := 'jobkit' || '_' || p_name;
    v_id uuid;
begin
    if to_regclass('vault.decrypted_secrets') is not null
       and to_regprocedure('vault.create_secret(text,text,text,uuid)') is not null then
        select d.id into v_id from vault.decrypted_secrets d where d.name = v_vault_name;
        if v_id is null then
            perform vault.create_secret(p_value, v_vault_name, 'jobkit ' || replace(p_name, '_', ' '));
        else
            perform vault.update_secret(v_id, p_value);
        end if;
        return;
    end if;
    insert into "jobkit".secrets (name, value) values (p_name, p_value)
    on conflict (name) do update set value = excluded.value, updated_at = now();
end
$$;

-- The public API: views
-- sql/functions/90_views.sql: job_history, and the comment on jobs that points a reader to the state notes.
-- Applied in file-name order (after 85_secrets.sql, before 99_grants.sql); sql/functions/README.md says how deploy applies these files.

-- Every attempt of every job: the recorded ones, plus each completed job's final attempt.
create or replace view "jobkit".job_history with (security_invoker = true) as
select a.job_id, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome, a.error, a.duration
from "jobkit".job_attempts a
union all
select j.id, j.attempts, j.worker_id, j.started_at, j.completed_at, 'completed', null::text,
       j.completed_at - j.started_at
from "jobkit".jobs j
where j.status = 'completed';
comment on view "jobkit".job_history is
    'jobkit: every attempt; job_attempts rows plus the completing attempt of each completed job.';

comment on table "jobkit".jobs is 'jobkit jobs: one row per job; see the state notes in sql/schema/tables.sql.';

-- Grants
-- sql/functions/99_grants.sql: nothing for PUBLIC, anon or authenticated; what jobkit's API needs for service_role. Last, so that it covers every function above.
-- Applied in file-name order (after 90_views.sql, the last); sql/functions/README.md says how deploy applies these files.

revoke all on all tables in schema "jobkit" from public;
revoke all on all sequences in schema "jobkit" from public;
revoke all on all functions in schema "jobkit" from public;
-- Grants, re-run at the end of every migration: anon and authenticated get nothing, service_role gets
-- what jobkit's API needs. On PostgreSQL without the Supabase roles, each skipped role is reported as a
-- NOTICE that `jobkit deploy` prints.
do $grants$
declare
    v_schema constant text := 'jobkit';
    v_role text;
begin
    foreach v_role in array array['anon', 'authenticated'] loop
        if exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
            execute pg_catalog.format('revoke all on schema %I from %I', v_schema, v_role);
            execute pg_catalog.format('revoke all on all tables in schema %I from %I', v_schema, v_role);
            execute pg_catalog.format('revoke all on all sequences in schema %I from %I', v_schema, v_role);
            execute pg_catalog.format('revoke all on all functions in schema %I from %I', v_schema, v_role);
        else
            raise notice 'jobkit: role % does not exist; skipped revoking its privileges', v_role;
        end if;
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'service_role') then
        execute pg_catalog.format('grant usage on schema %I to service_role', v_schema);
        execute pg_catalog.format('grant select, insert, update, delete on all tables in schema %I to service_role', v_schema);
        execute pg_catalog.format('grant usage, select on all sequences in schema %I to service_role', v_schema);
        execute pg_catalog.format('grant execute on all functions in schema %I to service_role', v_schema);
    else
        raise notice 'jobkit: role service_role does not exist; skipped granting it access';
    end if;
end
$grants$;

do $restore$
declare
    r record;
begin
    for r in select pg_catalog.format('grant execute on function %s to %I%s', p.oid::pg_catalog.regprocedure,
                                      g.grantee, case when g.grantable then ' with grant option' else '' end) as stmt
             from pg_temp.jobkit_function_grants g
             join pg_catalog.pg_proc p on p.proname operator(pg_catalog.=) g.name::pg_catalog.name
             where p.pronamespace operator(pg_catalog.=) 'jobkit'::pg_catalog.regnamespace loop
        execute r.stmt;
    end loop;
end
$restore$;
