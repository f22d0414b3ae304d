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
create or replace function {{ s }}.claim_jobs(
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
           array(select p.key from {{ s }}.pauses p where p.type = p_type),
           exists (select 1 from {{ s }}.row_triggers)  -- no p_type here: it cost 1.3 k Ir a job (drain)
    into v_key, v_type_max, v_fair, v_per_key, v_max_running, v_paused, v_triggers
    from {{ s }}.job_types t
    where t.type in (p_type, '*') order by t.type = '*' limit 1;
    if array_position(v_paused, null) is not null then
        return;  -- the type is paused
    end if;
    if v_triggers then  -- what the type's row triggers staged becomes jobs first (72_row_inbox.sql)
        if exists (select 1 from {{ s }}.row_triggers r where r.spec ->> 'type' = p_type) then
            perform {{ s }}.move_row_inbox(p_type, 10000);
        end if;
    end if;
    -- Waiting jobs of the type whose sleep ended or whose wait timed out become pending here, so
    -- that the wake-up at their due time claims them (47_waits.sql). No wait: one empty index probe.
    if exists (select 1 from {{ s }}.job_waits w where w.type = p_type and w.due <= now()) then
        perform {{ s }}._wake_due(p_type, greatest(v_limit, 1), false);
    end if;
    v_key := coalesce(p_rate_key, v_key);
    if v_fair then
        return query select * from {{ s }}._claim_fair(p_type, v_limit, p_worker, p_lease, v_key,
                                                      p_max_attempts, v_type_max, v_per_key,
                                                      v_max_running, v_paused);
        return;
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
            lease_expires_at = now() + p_lease, worker_id = p_worker,
            handler_max_attempts = p_max_attempts, updated_at = now()
        where j.id = any (array(
            select c.id from {{ s }}.jobs c
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
        perform {{ s }}.return_tokens(v_key, v_limit - v_claimed);
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
            (select h.key, h.ids, 1 from (select r.key, array_agg(r.id order by r.o) filter (where r.at <= now()) as ids
                 from (select j.concurrency_key as key, j.id, j.scheduled_for as at,
                              row_number() over v as o, first_value(j.concurrency_key) over v as k1
                       from {{ s }}.jobs j
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
                       from {{ s }}.jobs j
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
                       from {{ s }}.jobs j
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
                       from {{ s }}.jobs j
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
        insert into {{ s }}.key_cursors as c (type, last_key, keys) values (p_type, v_cursor, v_seen)
        on conflict (type) do update set last_key = excluded.last_key, keys = excluded.keys,
                                         updated_at = now();
    end if;
    if p_rate_key is not null then
        perform {{ s }}.return_tokens(p_rate_key, v_tokens - v_total);
    end if;
end
$$;

-- The seed's signature, over claim_jobs: whole rows, as claimed.
create or replace function {{ s }}.pick_jobs(p_type text, p_limit int, p_worker text, p_lease interval)
returns setof {{ s }}.jobs
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    v_ids := array(select c.id from {{ s }}.claim_jobs(p_type, p_limit, p_worker, p_lease) c);
    return query select j.* from {{ s }}.jobs j where j.id = any (v_ids)
                 order by j.priority desc, j.scheduled_for;
end
$$;

-- The seed's one-job form: pick_jobs for one job under the type's configured lease.
create or replace function {{ s }}.pick_job(p_type text) returns setof {{ s }}.jobs
language sql volatile set search_path = '' as $$
    select * from {{ s }}.pick_jobs(p_type, 1, 'pick_job', ({{ s }}.type_settings(p_type)).lease)
$$;
