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
create or replace function {{ s }}._event_token(p_name text, p_key text) returns text
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
create or replace function {{ s }}._lock_events(p_tokens text[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_whole text[] := '{}';  -- the names locked whole
begin
    if pg_catalog.cardinality(p_tokens) = 1 then  -- one event (an emit, most waits): no query
        perform pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended(
                    {{ (schema ~ ".event_name:") | literal }} operator(pg_catalog.||)
                    pg_catalog.split_part(p_tokens[1], pg_catalog.chr(31), 1), 0)),
                pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
                    {{ (schema ~ ".event:") | literal }} operator(pg_catalog.||) p_tokens[1], 0));
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
                     {{ (schema ~ ".event_name:") | literal }} operator(pg_catalog.||) n.n, 0) as k,
                 n.n operator(pg_catalog.=) any (v_whole) as whole
          from pg_catalog.unnest(p_tokens) as u(t)
          cross join lateral (select pg_catalog.split_part(u.t, pg_catalog.chr(31), 1) as n) n
          order by 1) x;
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended({{ (schema ~ ".event:") | literal }} operator(pg_catalog.||) x.t, 0))
    from (select distinct u.t from pg_catalog.unnest(p_tokens) as u(t)
          where pg_catalog.split_part(u.t, pg_catalog.chr(31), 1) operator(pg_catalog.<>) all (v_whole)
          order by u.t) x;
end
$$;

-- An event as a wait returns it.
create or replace function {{ s }}._event_json(p_event {{ s }}.events) returns jsonb
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
create or replace function {{ s }}._resolve_waits(p_ids uuid[], p_results jsonb[], p_wake boolean default true)
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
        delete from {{ s }}.job_waits w where w.job_id = any (p_ids)
        returning w.job_id, w.step, w.occurrence, w.attempt, w.created_at
    ), stepped as (
        insert into {{ s }}.job_steps as t (job_id, name, occurrence, attempt, status, result, started_at, kind)
        select g.job_id, g.step, g.occurrence, g.attempt, 'completed',
               p_results[pg_catalog.array_position(p_ids, g.job_id)], g.created_at, 'wait'
        from gone g
        on conflict (job_id, name, occurrence) do update
            set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
                error = null, started_at = excluded.started_at, finished_at = pg_catalog.now(), kind = 'wait'
            where t.status <> 'completed'
    ), woken as (
        update {{ s }}.jobs j
        set status = 'pending', scheduled_for = pg_catalog.now(), updated_at = pg_catalog.now()
        from gone g
        where j.id = g.job_id and j.status = 'waiting'
        returning j.type
    )
    select pg_catalog.array_agg(w.type) into v_types from woken w;
    if p_wake and v_types is not null then
        for r in select u.t, pg_catalog.count(*) as n from pg_catalog.unnest(v_types) as u(t) group by u.t loop
            perform {{ s }}._wake_for(r.t, r.n, null);
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
create or replace function {{ s }}.suspend_job(
    p_id uuid, p_attempt int, p_step text, p_occurrence int, p_kind text,
    p_events text[] default null, p_keys text[] default null, p_due timestamptz default null,
    p_job_ids uuid[] default null, p_delay interval default null
) returns text
language plpgsql volatile set search_path = '' as $$
declare
    v_tokens text[];
    v_job record;
    v_event {{ s }}.events;
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
        v_tokens := array(select {{ s }}._event_token(u.n, u.k)
                          from unnest(p_events, p_keys) as u(n, k) where u.n is not null);
        perform {{ s }}._lock_events(v_tokens);
    elsif p_kind = 'jobs' then
        if coalesce(pg_catalog.cardinality(p_job_ids), 0) = 0 or p_id = any (p_job_ids)
           or pg_catalog.array_position(p_job_ids, null) is not null then
            raise exception 'jobkit.suspend_job: a jobs wait needs the ids of other jobs'
                using errcode = '22023', hint = 'call ctx.wait_for_jobs([child_id, ...])';
        end if;
        -- their rows locked before their states are read: a finishing job waits for this
        -- registration, or was seen finished by it
        perform 1 from {{ s }}.jobs x where x.id = any (p_job_ids) order by x.id for share;
        select pg_catalog.jsonb_object_agg(u.id::text, coalesce(j.status, 'gone')),
               coalesce(pg_catalog.bool_and(j.status is null or j.status in ('completed', 'failed', 'dead', 'cancelled')), true)
        into v_statuses, v_resolved
        from (select distinct i.id from pg_catalog.unnest(p_job_ids) as i(id)) u
        left join {{ s }}.jobs j on j.id = u.id;
        if v_resolved then
            v_result := pg_catalog.jsonb_build_object('jobs', v_statuses);
        end if;
    end if;
    select j.type, j.created_at, j.worker_id, j.started_at into v_job
    from {{ s }}.jobs j
    where j.id = p_id and j.status = 'processing' and j.attempts = p_attempt
    for update;
    if not found then
        return null;
    end if;
    if p_kind = 'event' then  -- latch: the earliest event it has not consumed yet, since the job began
        select e.* into v_event
        from {{ s }}.events e
        join unnest(p_events, p_keys) as u(n, k) on e.name = u.n and e.key = coalesce(u.k, '')
        where e.emitted_at >= v_job.created_at and e.expires_at > pg_catalog.now()
          and not exists (select 1 from {{ s }}.job_steps s
                          where s.job_id = p_id and s.kind = 'wait' and s.result ->> 'id' = e.id::text)
        order by e.emitted_at, e.id
        limit 1;
        if found then
            v_resolved := true;
            v_result := {{ s }}._event_json(v_event);
        end if;
    end if;
    if not v_resolved and v_due is not null and v_due <= pg_catalog.now() then
        v_resolved := true;  -- its time has come already: a sleep's end, a timeout (null)
    end if;
    update {{ s }}.jobs j
    set status = case when v_resolved then 'pending' else 'waiting' end, attempts = j.attempts - 1,
        scheduled_for = case when v_resolved then pg_catalog.now() else coalesce(v_due, pg_catalog.now()) end,
        lease_expires_at = null, updated_at = pg_catalog.now()
    where j.id = p_id;
    insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    values (p_id, p_attempt, v_job.worker_id, v_job.started_at, 'waited');
    if v_resolved then
        insert into {{ s }}.job_steps as t (job_id, name, occurrence, attempt, status, result, started_at, kind)
        values (p_id, p_step, p_occurrence, p_attempt, 'completed', v_result, pg_catalog.now(), 'wait')
        on conflict (job_id, name, occurrence) do update
            set attempt = excluded.attempt, status = excluded.status, result = excluded.result, error = null,
                started_at = excluded.started_at, finished_at = pg_catalog.now(), kind = 'wait'
            where t.status <> 'completed';
        perform {{ s }}._wake_for(v_job.type, 1, null);
        return 'pending';
    end if;
    insert into {{ s }}.job_waits as w (job_id, type, step, occurrence, attempt, kind, events, job_ids, due)
    values (p_id, v_job.type, p_step, p_occurrence, p_attempt, p_kind, v_tokens,
            case when p_kind = 'jobs' then p_job_ids end, v_due)
    on conflict (job_id) do update
        set type = excluded.type, step = excluded.step, occurrence = excluded.occurrence,
            attempt = excluded.attempt, kind = excluded.kind, events = excluded.events,
            job_ids = excluded.job_ids, due = excluded.due, created_at = pg_catalog.now();
    if v_due is not null then
        perform {{ s }}._wake_for(v_job.type, 0, v_due);  -- the worker sets its timer for it
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
create or replace function {{ s }}.emit(p_name text, p_key text default null, p_data jsonb default null,
                                       p_id text default null)
returns bigint
language plpgsql volatile set search_path = '' as $$
declare
    v_ids bigint[] := {{ s }}._emit_many(p_name, array[p_key], array[p_data], array[p_id]);
begin
    if v_ids[1] is not null then
        return v_ids[1];
    end if;
    -- a retried emit (the same name, key and id): the stored event
    return (select e.id from {{ s }}.events e
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
create or replace function {{ s }}._emit_many(p_name text, p_keys text[], p_data jsonb[] default null,
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
    select pg_catalog.array_agg({{ s }}._event_token(p_name, coalesce(k.k, ''))),
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
    perform {{ s }}._lock_events(v_tokens);
    select c.types, c.retention into v_types, v_retention from {{ s }}.event_config c where c.name = p_name;
    with stored as (
        insert into {{ s }}.events as e (name, key, generation, data, dedupe, emitted_at, expires_at)
        select p_name, u.key,
               coalesce((select pg_catalog.max(x.generation) from {{ s }}.events x
                         where x.name = p_name and x.key = u.key), 0)
               + pg_catalog.row_number() over (partition by u.key order by u.ord),
               u.data, u.dedupe, pg_catalog.clock_timestamp(), pg_catalog.now() + coalesce(v_retention, interval '7 days')
        from (select coalesce(i.k, '') as key, i.data, i.dedupe, i.ord
              from unnest(p_keys, p_data, p_ids) with ordinality as i(k, data, dedupe, ord)) u  -- ROWS FROM
        order by u.ord
        on conflict (name, key, dedupe) where dedupe is not null do nothing
        returning e.id, {{ s }}._event_token(e.name, e.key) as token, {{ s }}._event_json(e) as json
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
        from {{ s }}.job_waits x
        where x.events operator(pg_catalog.&&) v_new_tokens order by x.job_id for update
    ) w;
    if v_waits is not null then
        perform {{ s }}._resolve_waits(v_waits, v_results);
    end if;
    if v_types is null then
        return v_new;
    elsif pg_catalog.cardinality(v_new) = 1 then
        perform {{ s }}.enqueue(p_type => t.t, p_payload => v_jsons[1],
                                p_idempotency_key => 'event:' operator(pg_catalog.||) v_new[1]::pg_catalog.text)
        from pg_catalog.unnest(v_types) as t(t);
    else
        perform 1 from {{ s }}.enqueue_many(
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
create or replace function {{ s }}._wake_due(p_type text, p_limit int, p_wake boolean default true)
returns int
language plpgsql volatile set search_path = '' set plan_cache_mode = auto as $$
declare
    v_ids uuid[];
begin
    select pg_catalog.array_agg(w.job_id) into v_ids from (
        select x.job_id from {{ s }}.job_waits x
        where (p_type is null or x.type = p_type) and x.due <= pg_catalog.now()
        order by x.due limit greatest(p_limit, 1)
        for update skip locked
    ) w;
    return {{ s }}._resolve_waits(v_ids, null, p_wake);
end
$$;

-- These jobs finished (completed, failed, cancelled; called by _notify_done): resolve the jobs
-- waits all of whose jobs have now finished. Nobody waits for jobs: one probe of an empty index.
create or replace function {{ s }}._jobs_finished(p_ids uuid[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_locked uuid[];
begin
    select pg_catalog.array_agg(w.job_id) into v_locked from (
        select x.job_id from {{ s }}.job_waits x
        where x.job_ids && p_ids order by x.job_id for update
    ) w;
    if v_locked is not null then
        perform {{ s }}._resolve_jobs_waits(v_locked);
    end if;
end
$$;

-- Of these (locked) jobs waits, resolve the ones whose jobs have all finished, with their states.
create or replace function {{ s }}._resolve_jobs_waits(p_ids uuid[]) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_results jsonb[];
begin
    select pg_catalog.array_agg(w.job_id), pg_catalog.array_agg(pg_catalog.jsonb_build_object('jobs', s.states))
    into v_ids, v_results
    from {{ s }}.job_waits w
    cross join lateral (
        select pg_catalog.jsonb_object_agg(u.id::text, coalesce(j.status, 'gone')) as states,
               coalesce(pg_catalog.bool_and(j.status is null
                        or j.status in ('completed', 'failed', 'dead', 'cancelled')), true) as done
        from (select distinct i.id from pg_catalog.unnest(w.job_ids) as i(id)) u
        left join {{ s }}.jobs j on j.id = u.id
    ) s
    where w.job_id = any (p_ids) and w.kind = 'jobs' and s.done;
    return {{ s }}._resolve_waits(v_ids, v_results);
end
$$;

-- Event waits (of p_ids; null: any) that a stored event matches: the earliest one each has not
-- consumed, emitted since its job began.
create or replace function {{ s }}._missed_events(p_ids uuid[], p_limit int)
returns table (job_id uuid, result jsonb)
language sql stable set search_path = '' as $$
    select distinct on (w.job_id) w.job_id, {{ s }}._event_json(e)
    from {{ s }}.job_waits w
    join {{ s }}.jobs j on j.id = w.job_id
    cross join lateral pg_catalog.unnest(w.events) as t(token)
    join {{ s }}.events e
      on e.name = pg_catalog.split_part(t.token, pg_catalog.chr(31), 1)
     and e.key = pg_catalog.substr(t.token, pg_catalog.strpos(t.token, pg_catalog.chr(31)) + 1)
    where w.kind = 'event' and (p_ids is null or w.job_id = any (p_ids))
      and e.emitted_at >= j.created_at and e.expires_at > pg_catalog.now()
      and not exists (select 1 from {{ s }}.job_steps s
                      where s.job_id = w.job_id and s.kind = 'wait' and s.result ->> 'id' = e.id::text)
    order by w.job_id, e.emitted_at, e.id
    limit p_limit
$$;

-- The backstop (sweep_stuck runs it): resolves what nothing resolved. Waits past their due time
-- (a lost wake-up); event waits that a stored event matches (an emit whose snapshot predated the
-- wait); jobs waits whose jobs all finished or were deleted; a waiting job without a wait is made
-- pending (it replays and waits again), a wait whose job no longer waits is deleted. Expired events
-- are deleted. Returns how many jobs it made pending.
create or replace function {{ s }}.sweep_waits(p_limit int default 1000) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_count int := 0;
    v_ids uuid[];
    v_results jsonb[];
    v_types text[];
    r record;
begin
    v_count := {{ s }}._wake_due(null, p_limit);
    select pg_catalog.array_agg(m.job_id) into v_ids from {{ s }}._missed_events(null, p_limit) m;
    if v_ids is not null then
        select pg_catalog.array_agg(x.job_id) into v_ids from (
            select w.job_id from {{ s }}.job_waits w where w.job_id = any (v_ids)
            order by w.job_id for update skip locked
        ) x;
        select pg_catalog.array_agg(m.job_id), pg_catalog.array_agg(m.result) into v_ids, v_results
        from {{ s }}._missed_events(v_ids, p_limit) m;
        v_count := v_count + {{ s }}._resolve_waits(v_ids, v_results);
    end if;
    select pg_catalog.array_agg(x.job_id) into v_ids from (
        select w.job_id from {{ s }}.job_waits w where w.kind = 'jobs'
        order by w.job_id limit p_limit for update skip locked
    ) x;
    if v_ids is not null then
        v_count := v_count + {{ s }}._resolve_jobs_waits(v_ids);
    end if;
    delete from {{ s }}.job_waits w
    where w.job_id = any (array(
        select x.job_id from {{ s }}.job_waits x
        left join {{ s }}.jobs j on j.id = x.job_id
        where j.id is null or j.status <> 'waiting'
        limit p_limit for update of x skip locked
    ));
    with lost as (
        update {{ s }}.jobs j set status = 'pending', scheduled_for = pg_catalog.now(), updated_at = pg_catalog.now()
        where j.id = any (array(
            select x.id from {{ s }}.jobs x
            where x.status = 'waiting' and x.scheduled_for <= pg_catalog.now() - interval '1 minute'
              and not exists (select 1 from {{ s }}.job_waits w where w.job_id = x.id)
            limit p_limit for update of x skip locked
        ))
        returning j.type
    )
    select pg_catalog.array_agg(l.type) into v_types from lost l;
    for r in select u.t, pg_catalog.count(*) as n from pg_catalog.unnest(v_types) as u(t) group by u.t loop
        perform {{ s }}._wake_for(r.t, r.n, null);
    end loop;
    v_count := v_count + coalesce(pg_catalog.cardinality(v_types), 0);
    delete from {{ s }}.events e where e.id = any (array(
        select x.id from {{ s }}.events x where x.expires_at < pg_catalog.now() limit 10000));
    return v_count;
end
$$;
