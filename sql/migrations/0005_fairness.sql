-- jobkit 0005: fairness and control. Concurrency keys with per-key and per-type running limits
-- enforced at claim time, round-robin claims across keys, pausing a type or a type's key,
-- telling a worker that its running job was cancelled, debounce and throttle at enqueue.
-- The indexes below are built under a lock that holds enqueues for as long as they take.

-- ---- 1. Columns, tables, indexes ----------------------------------------------------------------

alter table {{ s }}.jobs add column concurrency_key text;
alter table {{ s }}.jobs add constraint jobs_concurrency_key_length
    check (pg_catalog.length(concurrency_key) <= 1000);

create index jobs_key_claim_idx on {{ s }}.jobs (type, concurrency_key, priority desc, scheduled_for)
    where status = 'pending' and concurrency_key is not null;
create index jobs_key_running_idx on {{ s }}.jobs (type, concurrency_key)
    where status = 'processing' and concurrency_key is not null;

alter table {{ s }}.job_types add column fair boolean not null default false;
alter table {{ s }}.job_types add column key_template jsonb;
alter table {{ s }}.job_types add column max_running_per_key int check (max_running_per_key >= 1);
alter table {{ s }}.job_types add column max_running int check (max_running >= 1);
alter table {{ s }}.job_types add constraint job_types_limits_need_fair
    check (fair or (key_template is null and max_running_per_key is null and max_running is null));

create table {{ s }}.key_cursors (
    type       text primary key,
    last_key   text not null,
    updated_at timestamptz not null default now()
) with (fillfactor = 50);

create table {{ s }}.pauses (
    type      text not null,
    key       text,
    paused_at timestamptz not null default now(),
    constraint pauses_type_key unique nulls not distinct (type, key)
);

create table {{ s }}.enqueue_windows (
    type   text not null,
    kind   text not null check (kind in ('debounce', 'throttle')),
    key    text not null,
    job_id uuid,
    until  timestamptz,
    primary key (type, kind, key)
);

-- ---- 2. Keys -------------------------------------------------------------------------------------

create function {{ s }}._render_key(p_template jsonb, p_payload jsonb) returns text
language sql immutable set search_path = '' as $$
    select pg_catalog.string_agg(
               case when pg_catalog.jsonb_typeof(e.part) = 'string' then e.part #>> '{}'
                    else coalesce(p_payload #>> array(select pg_catalog.jsonb_array_elements_text(e.part)), '')
               end, '' order by e.n)
    from pg_catalog.jsonb_array_elements(p_template) with ordinality as e(part, n)
$$;

create function {{ s }}._job_key(p_type text, p_payload jsonb, p_key text) returns text
language plpgsql stable set search_path = '' as $$
declare
    v_fair boolean;
    v_template jsonb;
begin
    if p_key is not null then
        return p_key;
    end if;
    select t.fair, t.key_template into v_fair, v_template from {{ s }}.job_types t where t.type = p_type;
    if v_template is not null then
        return {{ s }}._render_key(v_template, p_payload);
    end if;
    return case when v_fair then '' end;
end
$$;

create function {{ s }}.job_types_key_backfill() returns trigger
language plpgsql set search_path = '' as $$
begin
    if new.fair and (tg_op = 'INSERT' or not old.fair) then
        update {{ s }}.jobs j
        set concurrency_key = coalesce({{ s }}._render_key(new.key_template, j.payload), ''), updated_at = now()
        where j.type = new.type and j.status in ('pending', 'processing') and j.concurrency_key is null;
    end if;
    return null;
end
$$;

create trigger job_types_key_backfill after insert or update of fair on {{ s }}.job_types
    for each row execute function {{ s }}.job_types_key_backfill();

-- ---- 3. Enqueue ----------------------------------------------------------------------------------

-- The enqueue functions gain parameters (a new signature each): the 0004 ones are dropped, and the
-- EXECUTE grants users gave their own roles on them are granted again on the new ones at the end.
create temporary table jobkit_0005_grants on commit drop as
select p.proname::text as name, r.rolname::text as grantee, a.is_grantable
from pg_catalog.pg_proc p
cross join lateral pg_catalog.aclexplode(p.proacl) a
join pg_catalog.pg_roles r on r.oid = a.grantee
where p.pronamespace = {{ schema | literal }}::pg_catalog.regnamespace
  and p.proname in ('enqueue', 'enqueue_many', 'enqueue_json')
  and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner;

drop function {{ s }}.enqueue_json(jsonb, jsonb, int[], timestamptz[], int[], text[], jsonb);
drop function {{ s }}.enqueue_many(text[], jsonb[], int[], timestamptz[], int[], text[], jsonb);
drop function {{ s }}.enqueue(text, jsonb, int, timestamptz, int, text, jsonb);

create function {{ s }}.enqueue(
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
                                        p_idempotency_key, v_key, p_debounce, p_throttle);
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

-- Debounce and throttle, serialised per (type, key) by the row lock on its enqueue_windows row.
create function {{ s }}._enqueue_windowed(
    p_type text, p_payload jsonb, p_priority int, p_run_at timestamptz, p_max_attempts int,
    p_idempotency_key text, p_key text, p_debounce interval, p_throttle interval
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
        insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, concurrency_key)
        values (v_new, p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts, p_key);
        return v_new;
    end if;
    -- Debounce: lock the key's row (created on first use), then move its pending job or add one.
    insert into {{ s }}.enqueue_windows as w (type, kind, key) values (p_type, 'debounce', p_key)
    on conflict (type, kind, key) do update set kind = excluded.kind
    returning w.job_id into v_id;
    if v_id is not null then
        update {{ s }}.jobs j
        set payload = p_payload, scheduled_for = now() + p_debounce, priority = coalesce(p_priority, 0),
            max_attempts = p_max_attempts, updated_at = now()
        where j.id = v_id and j.status = 'pending';
        if found then
            update {{ s }}.enqueue_windows w set until = now() + p_debounce
            where w.type = p_type and w.kind = 'debounce' and w.key = p_key;
            return v_id;
        end if;
    end if;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, concurrency_key)
    values (v_new, p_type, p_payload, coalesce(p_priority, 0), now() + p_debounce, p_max_attempts, p_key);
    update {{ s }}.enqueue_windows w set job_id = v_new, until = now() + p_debounce
    where w.type = p_type and w.kind = 'debounce' and w.key = p_key;
    return v_new;
end
$$;

create function {{ s }}.enqueue_many(
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

create function {{ s }}.enqueue_json(
    p_types jsonb,
    p_payloads jsonb,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null,
    p_trace_context jsonb default null,
    p_concurrency_key text[] default null
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
    v_ids := array(select gen_random_uuid() from generate_series(1, jsonb_array_length(p_payloads)));
    v_one := case when jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, trace_context)
    select v_ids[e.n], coalesce(v_one, p_types ->> (e.n - 1)::int), e.v, coalesce(p_priority[e.n], 0),
           coalesce(p_run_at[e.n], now()), p_max_attempts[e.n], p_trace_context
    from jsonb_array_elements(p_payloads) with ordinality as e(v, n);
    return query select u.id from unnest(v_ids) as u(id);
end
$$;

-- ---- 4. Claims -----------------------------------------------------------------------------------

create or replace function {{ s }}.claim_jobs(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null,
    p_max_attempts int default null
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text, trace_context jsonb)
language plpgsql volatile set search_path = '' as $$
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
begin
    if p_lease is null or p_lease < interval '5 seconds' then
        raise exception 'jobkit.claim_jobs: p_lease must be at least 5 seconds' using errcode = '22023';
    end if;
    select t.rate_limit, t.max_attempts, t.fair, t.max_running_per_key, t.max_running,
           array(select p.key from {{ s }}.pauses p where p.type = p_type)
    into v_key, v_type_max, v_fair, v_per_key, v_max_running, v_paused
    from {{ s }}.job_types t
    where t.type in (p_type, '*') order by t.type = '*' limit 1;
    if array_position(v_paused, null) is not null then
        return;  -- the type is paused
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

-- The claim of a fair type (see claim_jobs). One claimer of the type at a time: every job of the
-- type enters processing under this transaction-level advisory lock, and in READ COMMITTED each
-- statement after it sees every earlier claim, so the running counts it reads are exact and the
-- limits hold across workers. Completions, failures, sweeps and cancels only lower the counts and
-- take no lock. Keys are served round-robin: from the key after the type's cursor (the last key
-- the previous claim served), each key with due jobs and room gets its first job, then its second,
-- ...; a job without a key of its own is in the key ''.
create function {{ s }}._claim_fair(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text, p_max_attempts int,
    p_type_max int, p_per_key int, p_max_running int, p_paused text[]
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text, trace_context jsonb)
language plpgsql volatile set search_path = '' as $$
#variable_conflict use_column
declare
    v_limit int := p_limit;
    v_want int;
    v_cursor text;
    v_keys text[];
    v_rooms int[];
    v_firsts uuid[];
    v_quota int;
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
    select c.last_key into v_cursor from {{ s }}.key_cursors c where c.type = p_type;
    for v_pass in 1 .. 4 loop
        v_want := v_limit - v_total;
        exit when v_want <= 0;
        -- The keys with a due job and room, in turn from the cursor (at most v_want of them), each
        -- with its first job in claim order: one probe of jobs_key_claim_idx per key.
        with recursive after_cursor(key, id, at, n) as (
            (select j.concurrency_key, j.id, j.scheduled_for, 1 from {{ s }}.jobs j
             where j.type = p_type and j.status = 'pending' and j.concurrency_key > v_cursor
             order by j.concurrency_key, j.priority desc, j.scheduled_for limit 1)
            union all
            select x.concurrency_key, x.id, x.scheduled_for, a.n + 1
            from after_cursor a cross join lateral (
                select j.concurrency_key, j.id, j.scheduled_for from {{ s }}.jobs j
                where j.type = p_type and j.status = 'pending' and j.concurrency_key > a.key
                order by j.concurrency_key, j.priority desc, j.scheduled_for limit 1) x
        ), up_to_cursor(key, id, at, n) as (
            (select j.concurrency_key, j.id, j.scheduled_for, 1000000000 from {{ s }}.jobs j
             where j.type = p_type and j.status = 'pending' and j.concurrency_key is not null
             order by j.concurrency_key, j.priority desc, j.scheduled_for limit 1)
            union all
            select x.concurrency_key, x.id, x.scheduled_for, u.n + 1
            from up_to_cursor u cross join lateral (
                select j.concurrency_key, j.id, j.scheduled_for from {{ s }}.jobs j
                where j.type = p_type and j.status = 'pending' and j.concurrency_key > u.key
                order by j.concurrency_key, j.priority desc, j.scheduled_for limit 1) x
            where v_cursor is null or u.key < v_cursor
        ), walk as (
            select a.key, a.id, a.at, a.n from after_cursor a
            union all
            select u.key, u.id, u.at, u.n from up_to_cursor u where v_cursor is null or u.key <= v_cursor
        ), open as (
            select w.key, w.n, r.room,
                   case when w.at <= now() then w.id  -- else a due job of a lower priority, if any
                        else (select d.id from {{ s }}.jobs d
                              where d.type = p_type and d.concurrency_key = w.key and d.status = 'pending'
                                and d.scheduled_for <= now()
                              order by d.priority desc, d.scheduled_for limit 1) end as first
            from walk w
            cross join lateral (
                select case when p_per_key is null then v_want
                            else p_per_key - (select count(*)::int from {{ s }}.jobs x
                                              where x.type = p_type and x.concurrency_key = w.key
                                                and x.status = 'processing') end as room
            ) r
            where r.room > 0 and w.key <> all (p_paused)
        )
        select array_agg(o.key order by o.n), array_agg(o.room order by o.n), array_agg(o.first order by o.n)
        into v_keys, v_rooms, v_firsts
        from (select * from open o where o.first is not null limit v_want) o;
        exit when v_keys is null;
        v_quota := ceil(v_want::numeric / cardinality(v_keys))::int;
        -- Round robin: every key's first job, then every key's second, ...
        select array_agg(p.id order by p.rank, p.n), (array_agg(p.key order by p.rank desc, p.n desc))[1]
        into v_ids, v_last
        from (
            select k.first as id, 1::bigint as rank, k.n, k.key
            from unnest(v_keys, v_firsts) with ordinality as k(key, first, n)
            union all
            select c.id, c.rank + 1, k.n, k.key
            from unnest(v_keys, v_rooms, v_firsts) with ordinality as k(key, room, first, n)
            cross join lateral unnest(array(
                select j.id from {{ s }}.jobs j
                where j.type = p_type and j.concurrency_key = k.key and j.status = 'pending'
                  and j.scheduled_for <= now() and j.id <> k.first
                order by j.priority desc, j.scheduled_for
                limit least(k.room, v_quota) - 1
            )) with ordinality as c(id, rank)
            where v_quota > 1 and k.room > 1
            order by 2, 3
            limit v_want
        ) p;
        exit when v_ids is null;
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
        from claimed c order by array_position(v_ids, c.id);
        get diagnostics v_got = row_count;
        v_total := v_total + v_got;
        v_cursor := v_last;
        exit when v_got < v_want and v_quota >= v_want;
    end loop;
    if v_cursor is not null then
        insert into {{ s }}.key_cursors as c (type, last_key) values (p_type, v_cursor)
        on conflict (type) do update set last_key = excluded.last_key, updated_at = now();
    end if;
    if p_rate_key is not null then
        perform {{ s }}.return_tokens(p_rate_key, v_tokens - v_total);
    end if;
end
$$;

-- ---- 5. Running jobs a worker should stop --------------------------------------------------------

-- Of these running attempts, the ones that no longer hold their job, with the job's status now
-- (cancelled: cancel_job stopped it; gone: deleted). Workers ask once a second, on their heartbeat.
create function {{ s }}.running_check(p_ids uuid[], p_attempts int[]) returns table (id uuid, status text)
language sql stable set search_path = '' as $$
    select u.id, coalesce(j.status, 'gone')
    from unnest(p_ids, p_attempts) as u(id, attempt)
    left join {{ s }}.jobs j on j.id = u.id
    where j.id is null or j.status <> 'processing' or j.attempts <> u.attempt
$$;

-- ---- 6. Pause and resume -------------------------------------------------------------------------

-- Pause a type (p_key null) or one key of it: its jobs are not claimed and (for a type) not woken
-- for until resume_type. True when it was not paused yet.
create function {{ s }}.pause_type(p_type text, p_key text default null) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    if p_type is null or p_type = '' then
        raise exception 'jobkit.pause_type: p_type must be a non-empty job type' using errcode = '22023';
    end if;
    insert into {{ s }}.pauses (type, key) values (p_type, p_key) on conflict do nothing;
    return found;
end
$$;

-- Resume a paused type or key and wake the workers for its due jobs. True when it was paused.
create function {{ s }}.resume_type(p_type text, p_key text default null) returns boolean
language plpgsql volatile set search_path = '' as $$
begin
    delete from {{ s }}.pauses p where p.type = p_type and p.key is not distinct from p_key;
    if not found then
        return false;
    end if;
    perform {{ s }}.wake(p_type);
    return true;
end
$$;

create or replace function {{ s }}.wake(p_type text, p_max_calls int default null) returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_batch int := ({{ s }}.setting('batch_size'))::int;
    v_cap int := greatest(coalesce(p_max_calls, ({{ s }}.setting('max_fanout'))::int), 1);
    v_backlog bigint;
begin
    if exists (select 1 from {{ s }}.pauses p where p.type = p_type and p.key is null) then
        return 0;
    end if;
    select count(*) into v_backlog from (
        select 1 from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now()
        limit v_batch * v_cap
    ) due;
    if v_backlog = 0 then
        return 0;
    end if;
    return {{ s }}._send_wake(p_type, least(v_cap, ceil(v_backlog::numeric / v_batch)::int));
end
$$;

create or replace function {{ s }}._wake_for(p_type text, p_due bigint, p_at timestamptz) returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_guc constant text := {{ (schema ~ ".wakes") | literal }};
    v_state jsonb := coalesce(nullif(current_setting(v_guc, true), ''), '{}')::jsonb;
    v_mine jsonb := coalesce(v_state -> p_type, '[0, 0, null]'::jsonb);
    v_calls int := (v_mine ->> 0)::int;
    v_rows bigint := (v_mine ->> 1)::bigint + coalesce(p_due, 0);
    v_at timestamptz := (v_mine ->> 2)::timestamptz;
    v_want int;
begin
    if not coalesce((select t.wake_on_insert from {{ s }}.job_types t
                     where t.type in (p_type, '*') order by t.type = '*' limit 1), true)
       or exists (select 1 from {{ s }}.pauses p where p.type = p_type and p.key is null) then
        return;
    end if;
    if v_rows > 0 then
        v_want := least(greatest(({{ s }}.setting('max_fanout'))::int, 1),
                        ceil(v_rows::numeric / greatest(({{ s }}.setting('batch_size'))::int, 1))::int);
        if v_want > v_calls then
            perform {{ s }}._send_wake(p_type, v_want - v_calls);
            v_calls := v_want;
        end if;
    elsif p_at is not null and (v_at is null or p_at < v_at) then
        perform {{ s }}._send_wake(p_type, 1, p_at);
        v_at := p_at;
    end if;
    perform set_config(v_guc, jsonb_set(v_state, array[p_type],
                                        jsonb_build_array(v_calls, v_rows, v_at))::text, true);
end
$$;

create or replace function {{ s }}.next_due(p_type text) returns timestamptz
language plpgsql stable set search_path = '' as $$
declare
    v_priority int;
    v_at timestamptz;
    v_best timestamptz;
begin
    if exists (select 1 from {{ s }}.pauses p where p.type = p_type and p.key is null) then
        return null;  -- paused: nothing to wait for
    end if;
    select j.priority into v_priority from {{ s }}.jobs j
    where j.type = p_type and j.status = 'pending' order by j.priority desc limit 1;
    while v_priority is not null loop
        select j.scheduled_for into v_at from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.priority = v_priority
        order by j.scheduled_for limit 1;
        v_best := least(v_best, v_at);
        select j.priority into v_priority from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.priority < v_priority
        order by j.priority desc limit 1;
    end loop;
    return v_best;
end
$$;

create or replace function {{ s }}.pending_types() returns setof text
language sql stable set search_path = '' as $$
    with recursive t(type) as (
        (select j.type from {{ s }}.jobs j where j.status = 'pending' order by j.type limit 1)
        union all
        select (select j.type from {{ s }}.jobs j
                where j.status = 'pending' and j.type > t.type order by j.type limit 1)
        from t where t.type is not null
    )
    select t.type from t
    where t.type is not null
      and not exists (select 1 from {{ s }}.pauses p where p.type = t.type and p.key is null)
$$;

create or replace function {{ s }}.due_count(p_type text, p_cap int default 1000) returns int
language sql stable set search_path = '' as $$
    select count(*)::int from (
        select 1 from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now()
          and not exists (select 1 from {{ s }}.pauses p where p.type = p_type and p.key is null)
        limit p_cap
    ) due
$$;

-- ---- 7. Pruning the enqueue windows --------------------------------------------------------------

create or replace function {{ s }}.prune(
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
    delete from {{ s }}.enqueue_windows w where w.until < now() - p_older_than;
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

-- ---- 8. Security ---------------------------------------------------------------------------------
alter table {{ s }}.key_cursors enable row level security;
alter table {{ s }}.pauses enable row level security;
alter table {{ s }}.enqueue_windows enable row level security;
do $grants$
declare
    r record;
begin
    for r in select g.name, g.grantee, g.is_grantable from pg_temp.jobkit_0005_grants g loop
        execute pg_catalog.format('grant execute on function %I.%I to %I%s', {{ schema | literal }}, r.name,
                                  r.grantee, case when r.is_grantable then ' with grant option' else '' end);
    end loop;
end
$grants$;
revoke all on all tables in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
