-- The public API: wake-ups
-- sql/functions/70_wake.sql: waking workers (pg_net or NOTIFY), coalescing, the due-time queries, and the insert trigger.
-- Applied in file-name order (after 60_sweeps.sql, before 80_rate_limits.sql); sql/functions/README.md says how deploy applies these files.
{% from "shared/wake.sql" import wake_first, wake_needed, wake_on with context %}

-- Wake the worker for one type when it has runnable work: over pg_net, up to
-- ceil(backlog / batch_size) concurrent calls capped by p_max_calls (default: max_fanout); over
-- NOTIFY, one notification for the listening workers. Returns the number of calls made. It never
-- raises: a wake-up that cannot be sent is recorded as failed (and the cron backup tries again).
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

-- Wake every type with due work. The cron backup calls this; it first records the outcome of
-- earlier wake-ups.
create or replace function {{ s }}.wake_all() returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_type text;
    v_calls int := 0;
begin
    perform {{ s }}.reconcile_wakeups();
    for v_type in select p.t from {{ s }}.pending_types() as p(t) loop
        v_calls := v_calls + {{ s }}.wake(v_type);
    end loop;
    return v_calls;
end
$$;

-- Copy pg_net's answers into wakeups before pg_net's TTL deletes them. Returns rows settled.
create or replace function {{ s }}.reconcile_wakeups(p_unanswered_after interval default '10 minutes')
returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_settled int := 0;
    v_late int;
begin
    if to_regclass('net._http_response') is not null then
        update {{ s }}.wakeups w
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
    update {{ s }}.wakeups w
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
create or replace function {{ s }}.consume_wake(p_nonce text, p_expires_at timestamptz) returns boolean
language sql volatile set search_path = '' as $$
    with expired as (
        delete from {{ s }}.wake_nonces n
        where n.nonce = any (array(select e.nonce from {{ s }}.wake_nonces e
                                   where e.expires_at < pg_catalog.now() - interval '10 minutes'
                                   order by e.expires_at limit 10))
    ), fresh as (
        insert into {{ s }}.wake_nonces (nonce, expires_at) values (p_nonce, p_expires_at)
        on conflict (nonce) do nothing
        returning true as ok
    )
    select coalesce((select f.ok from fresh f), false)
$$;

-- A worker drains p_type: enqueues of the type send no wake-up for p_for, which the worker
-- refreshes while its drain runs (a worker that dies stops refreshing: wake-ups resume after p_for,
-- and the cron wake-up covers what was enqueued meanwhile).
create or replace function {{ s }}.wake_draining(p_type text, p_for interval) returns void
language sql volatile set search_path = '' as $$
    insert into {{ s }}.wake_drains as d (type, draining_until)
    values (p_type, pg_catalog.clock_timestamp() + p_for)
    on conflict (type) do update set draining_until = excluded.draining_until
$$;

-- A worker's drain of p_type ended. Only when no enqueue that skipped its wake-up relying on
-- a drain is still in flight (they hold the type's shared wake lock until they end): then enqueues
-- send wake-ups again, and the worker checks once more for due jobs (so the last skipped enqueue's
-- job is seen by that check or by a new wake-up). False: try again after another look for jobs.
-- p_handoff (the worker is stopping): mark idle in any case and wake another worker for what is due
-- (unconditionally when an enqueue is still in flight, since its job is not visible yet).
create or replace function {{ s }}.wake_idle(p_type text, p_handoff boolean default false) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_free boolean := pg_catalog.pg_try_advisory_xact_lock(
        pg_catalog.hashtextextended({{ (schema ~ ".wake:") | literal }} || p_type, 0));
begin
    if not v_free and not p_handoff then
        return false;
    end if;
    insert into {{ s }}.wake_drains as d (type, draining_until, idle_at)
    values (p_type, null, pg_catalog.clock_timestamp())
    on conflict (type) do update set draining_until = null, idle_at = excluded.idle_at;
    if p_handoff then
        if v_free then
            perform {{ s }}.wake(p_type);
        else
            perform {{ s }}._send_wake(p_type, 1);
        end if;
    end if;
    return v_free;
end
$$;

-- When the next pending job of a type becomes due, or its next waiting job's wait ends (null: none), by a skip scan over the claim
-- index: one probe per distinct priority, however many jobs are pending.
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
    if exists (select 1 from {{ s }}.row_inbox i where i.type = p_type) then
        return now();  -- staged by a row trigger: the next claim moves it (72_row_inbox.sql)
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
    -- a waiting job's sleep end or timeout (47_waits.sql): the worker's timer claims it then
    return least(v_best, (select min(w.due) from {{ s }}.job_waits w
                         where w.type = p_type and w.due is not null));
end
$$;

-- Every type that has pending jobs, by a skip scan over jobs_claim_idx (one index probe per type,
-- however many jobs are pending).
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

-- Due jobs of a type (bounded), for a worker deciding whether to wait for rate-limit tokens.
create or replace function {{ s }}.due_count(p_type text, p_cap int default 1000) returns int
language sql stable set search_path = '' as $$
    select count(*)::int from (
        select 1 from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now()
          and not exists (select 1 from {{ s }}.pauses p where p.type = p_type and p.key is null)
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
create or replace function {{ s }}._wake_for(p_type text, p_due bigint, p_at timestamptz) returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_memo text := pg_catalog.current_setting({{ (schema ~ ".wakes") | literal }}, true);
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
        {{ wake_first(type="p_type", send="v_send", void="v_void") | indent(8) }}
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
                v_void := pg_catalog.set_config({{ (schema ~ ".wakes") | literal }}, pg_catalog.jsonb_set(
                    v_memo::jsonb, array[p_type],
                    pg_catalog.jsonb_set(v_mine, '{1}', pg_catalog.to_jsonb(v_rows)))::text, true);
                return;
            elsif v_rows = 0 and (p_at is null or p_at >= v_at) then
                return;
            end if;
        end if;
    end if;
    if v_rows > 1 and v_batch is null then  -- one due job wants one call: no settings to read
        select greatest((select (x.value)::int from {{ s }}.settings x where x.key = 'max_fanout'), 1),
               greatest((select (x.value)::int from {{ s }}.settings x where x.key = 'batch_size'), 1)
        into v_fanout, v_batch;
    end if;
    if v_rows > 1 then
        v_want := least(v_fanout, pg_catalog.ceil(v_rows::numeric / v_batch)::int);
    end if;
    if v_rows > 0 and v_calls = 0 then
        -- the first due-now wake-up: wake_needed says null for a type not to be woken
        {{ wake_needed(type="p_type", send="v_send", label="needed") | indent(8) }}
        if v_send is null then
            return;
        elsif v_send then
            v_void := {{ s }}._send_wake(p_type, v_want);
        end if;
        v_calls := v_want;
    elsif (v_rows > 0 and v_want > v_calls)
          or (v_rows = 0 and p_at is not null and (v_at is null or p_at < v_at)) then
        if not {{ wake_on(type="p_type") | indent(15) }} then
            return;
        end if;
        if v_rows > 0 then
            v_void := {{ s }}._send_wake(p_type, v_want - v_calls);
            v_calls := v_want;
        else
            v_void := {{ s }}._send_wake(p_type, 1, p_at);
            v_at := p_at;
        end if;
    end if;
    if coalesce(v_memo, '') = '' then
        -- the transaction's first record: written as text, no jsonb to parse or build
        v_void := pg_catalog.set_config({{ (schema ~ ".wakes") | literal }},
            '{' || pg_catalog.to_json(p_type)::text || ':[' || v_calls::text || ',' || v_rows::text
            || ',' || coalesce(pg_catalog.to_json(v_at)::text, 'null') || ',' || coalesce(v_batch::text, 'null')
            || ',' || coalesce(v_fanout::text, 'null') || ']}', true);
    else
        v_void := pg_catalog.set_config({{ (schema ~ ".wakes") | literal }}, pg_catalog.jsonb_set(
            coalesce(nullif(v_memo, ''), '{}')::jsonb, array[p_type],
            pg_catalog.jsonb_build_array(v_calls, v_rows, v_at, v_batch, v_fanout))::text, true);
    end if;
end
$$;

-- Send p_calls wake-ups (p_at: the time the type's next job becomes due) over the configured transport.
create or replace function {{ s }}._send_wake(p_type text, p_calls int, p_at timestamptz default null) returns int
language plpgsql volatile security definer set search_path = '' as $$
begin
    if ({{ s }}.setting('transport')) #>> '{}' = 'pg_net' then
        return {{ s }}._wake_http(p_type, p_calls, p_at);
    end if;
    -- NOTIFY has no answer to reconcile, so it is not recorded in wakeups; it is delivered at
    -- commit, and duplicates within a transaction fold into one.
    perform pg_notify(({{ s }}.setting('channel')) #>> '{}',
                      case when p_at is null then json_build_object('type', p_type, 'calls', p_calls)
                           else json_build_object('type', p_type, 'at', extract(epoch from p_at)) end::text);
    return 1;
end
$$;

-- Send p_calls signed wake-ups over pg_net: X-Jobkit-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256
-- of "<t>.<body>"> with the worker's secret, so that a request read from pg_net's queue (readable by
-- every role) cannot call the worker after a short window. Each request gets its own nonce.
create or replace function {{ s }}._wake_http(p_type text, p_calls int, p_at timestamptz default null)
returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_url text := {{ s }}.secret('worker_url');
    v_secret text := {{ s }}.secret('worker_secret');
    v_body jsonb;
    v_t text;
    v_request bigint;
begin
    if v_url is null or v_secret is null then
        insert into {{ s }}.wakeups (type, transport, outcome, error, checked_at)
        values (p_type, 'pg_net', 'failed', 'worker URL or secret not set: run `jobkit secrets set`', now());
        return 0;
    end if;
    v_t := floor(extract(epoch from clock_timestamp()))::bigint::text;
    for i in 1 .. p_calls loop
        v_body := jsonb_build_object('type', p_type, 'budget_ms', ({{ s }}.setting('budget_ms'))::int,
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
                'X-Jobkit-Signature', 't=' || v_t || ',v1=' || encode({{ s }}._hmac(
                    convert_to(v_secret, 'UTF8'), convert_to(v_t || '.' || v_body::text, 'UTF8')), 'hex')),
            timeout_milliseconds := ({{ s }}.setting('wake_timeout_ms'))::int
        );
        insert into {{ s }}.wakeups (type, transport, request_id) values (p_type, 'pg_net', v_request);
    end loop;
    return p_calls;
exception when others then
    -- pg_net missing or refusing: record it, never break the caller (an enqueue, a cron tick).
    insert into {{ s }}.wakeups (type, transport, outcome, error, checked_at)
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
create or replace function {{ s }}.jobs_wake_on_insert() returns trigger
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
           and coalesce(pg_catalog.current_setting({{ (schema ~ ".wakes") | literal }}, true), '') = '' then
            {{ wake_first(type="v_type", send="v_send", void="v_void") | indent(12) }}
        else
            v_void := {{ s }}._wake_for(v_type, (v_at <= pg_catalog.now())::int,
                                        case when v_at > pg_catalog.now() then v_at end);
        end if;
    elsif v_more then  -- several: one plain aggregate; grouped by type only when types differ
        select count(*) filter (where n.scheduled_for <= pg_catalog.now()),
               min(n.scheduled_for) filter (where n.scheduled_for > pg_catalog.now()),
               bool_and(n.type operator(pg_catalog.=) v_type)
        into v_due, v_at, v_same from new_jobs n where n.status = 'pending';
        if v_same then
            v_void := {{ s }}._wake_for(v_type, v_due, v_at);
        else
            perform {{ s }}._wake_for(n.type, n.due, n.at)
            from (select n.type, count(*) filter (where n.scheduled_for <= pg_catalog.now()) as due,
                         min(n.scheduled_for) filter (where n.scheduled_for > pg_catalog.now()) as at
                  from new_jobs n where n.status = 'pending' group by n.type) n;
        end if;
    end if;
    return null;
end
$$;

create or replace trigger jobs_wake_on_insert after insert on {{ s }}.jobs
    referencing new table as new_jobs
    for each statement execute function {{ s }}.jobs_wake_on_insert();
