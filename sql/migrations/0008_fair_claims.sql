-- jobkit 0008: faster fair claims; debounced and throttled jobs carry the enqueuer's trace context.
--
-- The two concurrency-key indexes keep one entry per job (no B-tree deduplication).
-- Jobs enqueued together share (type, key, priority, scheduled_for), so deduplication packed a key's
-- jobs into posting lists; an index scan can mark an entry dead only when every job in its posting
-- list is gone, so each claim's per-key probe re-read every already-claimed job at the head of
-- its key from the heap until VACUUM ran (measured: the fair claim's key walk took twice as long
-- midway through a 100,000-job drain over 50 keys). One entry per job is killed on first sight.
-- Entries written before this migration stay packed until their jobs leave the index.
alter index {{ s }}.jobs_key_claim_idx set (deduplicate_items = off);
alter index {{ s }}.jobs_key_running_idx set (deduplicate_items = off);

-- A fair claim walks each key once: the probe that finds a key also brings its first jobs, as many
-- as the batch needs per key, sized from how many keys the previous claim found (key_cursors.keys).
-- Before, a key with room for more than one job was probed twice (measured: 50 keys, batches of
-- 100: the walk and the second round of probes each took about as long as the other).
alter table {{ s }}.key_cursors add column keys int;

-- One probe of jobs_key_claim_idx for _claim_fair: the first key past the bound, and the due ones
-- among its first v_take jobs in claim order (null: none of them is due).
{% macro key_head(bound) -%}
select r.key, array_agg(r.id order by r.o) filter (where r.at <= now()) as ids
                 from (select j.concurrency_key as key, j.id, j.scheduled_for as at,
                              row_number() over v as o, first_value(j.concurrency_key) over v as k1
                       from {{ s }}.jobs j
                       where j.type = p_type and j.status = 'pending' and {{ bound }}
                       window v as (order by j.concurrency_key, j.priority desc, j.scheduled_for
                                    rows unbounded preceding)
                       order by j.concurrency_key, j.priority desc, j.scheduled_for
                       limit v_take) r
                 where r.key = r.k1
                 group by r.key
{%- endmacro %}

-- The claim of a fair type (see claim_jobs). One claimer of the type at a time: every job of the
-- type enters processing under this transaction-level advisory lock, and in READ COMMITTED each
-- statement after it sees every earlier claim, so the running counts it reads are exact and the
-- limits hold across workers. Completions, failures, sweeps and cancels only lower the counts and
-- take no lock. Keys are served round-robin: from the key after the type's cursor (the last key
-- the previous claim served), each key with due jobs and room gets its first job, then its second,
-- ...; a job without a key of its own is in the key ''. One index probe per key finds the key and
-- its first jobs in claim order (as many as the batch needs per key, from how many keys the
-- previous claim found, key_cursors.keys; 0008): a claim walks each key once. Its statements keep
-- one generic plan (plan_cache_mode): planning the walk afresh took as long as running it; and
-- no JIT: the walk's estimated cost crossed jit_above_cost, and compiling it took 50-100 ms a claim.
create or replace function {{ s }}._claim_fair(
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
    perform pg_advisory_xact_lock(hashtextextended({{ schema | literal }} || '.claim:' || p_type, 0));
    if p_max_running is not null then
        select least(v_limit, p_max_running - count(*)::int) into v_limit from {{ s }}.jobs r
        where r.type = p_type and r.status = 'processing' and r.concurrency_key is not null;
    end if;
    if v_limit <= 0 then
        return;
    end if;
    if p_rate_key is not null then
        select count(*) into v_tokens from (
            select 1 from {{ s }}.jobs j
            where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit v_limit
        ) due;
        v_limit := {{ s }}.take_tokens(p_rate_key, v_tokens);
        v_tokens := v_limit;
        if v_limit = 0 then
            return;
        end if;
    end if;
    select c.last_key, c.keys into v_cursor, v_seen from {{ s }}.key_cursors c where c.type = p_type;
    for v_pass in 1 .. 4 loop
        v_want := v_limit - v_total;
        exit when v_want <= 0;
        v_take := least(v_want, ceil(v_want::numeric / greatest(coalesce(v_seen, v_want), 1))::int);
        -- The keys with a due job and room, in turn from the cursor (at most v_want of them), each
        -- with up to v_take of its due jobs in claim order: one probe of jobs_key_claim_idx per key
        -- (a second one only for a key whose first jobs are all scheduled later).
        with recursive after_cursor(key, ids, n) as (
            (select h.key, h.ids, 1 from ({{ key_head('j.concurrency_key > v_cursor') }}) h)
            union all
            select h.key, h.ids, a.n + 1
            from after_cursor a cross join lateral ({{ key_head('j.concurrency_key > a.key') }}) h
        ), up_to_cursor(key, ids, n) as (
            (select h.key, h.ids, 1000000000 from ({{ key_head('j.concurrency_key is not null') }}) h)
            union all
            select h.key, h.ids, u.n + 1
            from up_to_cursor u cross join lateral ({{ key_head('j.concurrency_key > u.key') }}) h
            where v_cursor is null or u.key < v_cursor
        ), walk as (
            select a.key, a.ids, a.n from after_cursor a
            union all
            select u.key, u.ids, u.n from up_to_cursor u where v_cursor is null or u.key <= v_cursor
        ), open as (
            select w.key, w.n,
                   (coalesce(w.ids, array(  -- only later jobs first: its due ones of lower priority
                        select d.id from {{ s }}.jobs d
                        where d.type = p_type and d.concurrency_key = w.key and d.status = 'pending'
                          and d.scheduled_for <= now()
                        order by d.priority desc, d.scheduled_for limit v_take)))[1:r.room] as ids
            from walk w
            cross join lateral (
                select case when p_per_key is null then v_take
                            else least(v_take, p_per_key - (select count(*)::int from {{ s }}.jobs x
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
            update {{ s }}.jobs j
            set status = 'processing', attempts = j.attempts + 1, started_at = now(),
                lease_expires_at = now() + p_lease, worker_id = p_worker,
                handler_max_attempts = p_max_attempts, updated_at = now()
            where j.id = any (v_ids) and j.status = 'pending' and j.scheduled_for <= now()
            returning j.id, j.type, j.attempts,
                      j.round_start + {{ s }}.attempt_limit(j.max_attempts, p_max_attempts, p_type_max) as cap,
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
        insert into {{ s }}.key_cursors as c (type, last_key, keys) values (p_type, v_cursor, v_seen)
        on conflict (type) do update set last_key = excluded.last_key, keys = excluded.keys,
                                         updated_at = now();
    end if;
    if p_rate_key is not null then
        perform {{ s }}.return_tokens(p_rate_key, v_tokens - v_total);
    end if;
end
$$;

-- Debounced and throttled jobs carry the enqueuer's trace context like every other job (0004 left
-- them without): _enqueue_windowed takes it, enqueue passes it on.
drop function {{ s }}._enqueue_windowed(text, jsonb, int, timestamptz, int, text, text, interval, interval);

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
    v_key := {{ s }}._job_key(p_type, p_payload, p_concurrency_key);
    if p_debounce is not null or p_throttle is not null then
        return {{ s }}._enqueue_windowed(p_type, p_payload, p_priority, p_run_at, p_max_attempts,
                                        p_idempotency_key, v_key, p_debounce, p_throttle,
                                        p_trace_context);
    end if;
    if p_idempotency_key is null then  -- nothing to conflict on: a plain insert
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, trace_context,
                                  concurrency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_trace_context, v_key)
        returning id into v_id;
        return v_id;
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
create function {{ s }}._enqueue_windowed(
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


revoke all on function {{ s }}._enqueue_windowed(text, jsonb, int, timestamptz, int, text, text, interval, interval, jsonb)
    from public;
{% include "grants.sql" %}
