-- jobkit 0010: a wake-up is accepted once per fleet, and wake-ups coalesce across transactions.
--
-- Accepted once: the worker consumes each signed wake-up's signature here (consume_wake), so a
-- request read from pg_net's queue (readable by every role) is accepted by one worker process of
-- the fleet, once, also across restarts; a repeat is answered as a harmless duplicate.
-- Coalesced: a burst of single-row enqueue transactions sent one pg_net request each (pg_net sends
-- about 200 a second, shared with the application's own requests). Now none is sent while a worker
-- drains or lingers on the type (wake_draining / wake_idle), and at most one a second otherwise.
-- New tables and functions only, and _wake_for replaced: no lock on jobs.

-- Signed wake-ups accepted, by signature, until their window has surely ended (0010). The primary
-- key makes acceptance once per fleet: every worker process consumes here (consume_wake).
create table {{ s }}.wake_nonces (
    nonce      text primary key,
    expires_at timestamptz not null
);
create index wake_nonces_expires_idx on {{ s }}.wake_nonces (expires_at);

-- Per type, what workers say about it (0010): draining until (refreshed while a drain runs) and
-- when a worker last went idle on it. Written by workers only, so an enqueue never waits for them.
create table {{ s }}.wake_drains (
    type           text primary key,
    draining_until timestamptz,
    idle_at        timestamptz
);

-- Per type, when an enqueue last sent a due-now wake-up (0010). Written by enqueues only, under a
-- try-lock, so no enqueue ever waits for another.
create table {{ s }}.wake_sent (
    type    text primary key,
    sent_at timestamptz not null
);

-- Accept a signed wake-up once across the whole fleet (0010): true the first time its signature
-- is seen, false for any repeat (a replay read from pg_net's queue, pg_net's own later delivery,
-- another worker process, the same one after a restart). p_expires_at: when its window ends; the
-- row is kept 10 minutes longer (clock skew between workers and the database), and each call
-- deletes a few rows past that.
create function {{ s }}.consume_wake(p_nonce text, p_expires_at timestamptz) returns boolean
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

-- A worker drains p_type (0010): enqueues of the type send no wake-up for p_for, which the worker
-- refreshes while its drain runs (a worker that dies stops refreshing: wake-ups resume after p_for,
-- and the cron wake-up covers what was enqueued meanwhile).
create function {{ s }}.wake_draining(p_type text, p_for interval) returns void
language sql volatile set search_path = '' as $$
    insert into {{ s }}.wake_drains as d (type, draining_until)
    values (p_type, pg_catalog.clock_timestamp() + p_for)
    on conflict (type) do update set draining_until = excluded.draining_until
$$;

-- A worker's drain of p_type ended (0010). Only when no enqueue that skipped its wake-up relying on
-- a drain is still in flight (they hold the type's shared wake lock until they end): then enqueues
-- send wake-ups again, and the worker checks once more for due jobs (so the last skipped enqueue's
-- job is seen by that check or by a new wake-up). False: try again after another look for jobs.
-- p_handoff (the worker is stopping): mark idle in any case and wake another worker for what is due
-- (unconditionally when an enqueue is still in flight, since its job is not visible yet).
create function {{ s }}.wake_idle(p_type text, p_handoff boolean default false) returns boolean
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

-- Whether this transaction must send a due-now wake-up for p_type (0010); records it when so.
-- Wake-ups coalesce across transactions: none while a worker says it drains the type, and none
-- within a second of another one sent since a worker last went idle on the type (that one is in
-- flight: its drain will see this job). The type's wake lock, taken shared first and held to the
-- end of the transaction, keeps a worker from going idle (wake_idle) until this enqueue has ended,
-- so its job is never left behind. Outside READ COMMITTED the snapshot may predate a worker going
-- idle, so it always sends. The record is written under a try-lock: no enqueue waits for another.
create function {{ s }}._wake_needed(p_type text) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_draining timestamptz;
    v_idle timestamptz;
    v_sent timestamptz;
begin
    if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
        return true;
    end if;
    perform pg_catalog.pg_advisory_xact_lock_shared(
        pg_catalog.hashtextextended({{ (schema ~ ".wake:") | literal }} || p_type, 0));
    select d.draining_until, d.idle_at into v_draining, v_idle
    from {{ s }}.wake_drains d where d.type = p_type;
    if v_draining > pg_catalog.clock_timestamp() then
        return false;
    end if;
    select w.sent_at into v_sent from {{ s }}.wake_sent w where w.type = p_type;
    if v_sent > pg_catalog.clock_timestamp() - interval '1 second'
       and v_sent > coalesce(v_idle, '-infinity'::timestamptz) then
        return false;
    end if;
    if pg_catalog.pg_try_advisory_xact_lock(
           pg_catalog.hashtextextended({{ (schema ~ ".wake_sent:") | literal }} || p_type, 0)) then
        insert into {{ s }}.wake_sent as w (type, sent_at) values (p_type, pg_catalog.clock_timestamp())
        on conflict (type) do update set sent_at = excluded.sent_at;
    end if;
    return true;
end
$$;

-- Wake the worker for jobs this transaction made runnable: p_due jobs due now, or (when none is
-- due) the earliest time p_at at which one becomes due. What was already sent in this transaction
-- is remembered in a transaction-local setting, so however many enqueue calls or statements a
-- transaction makes, it sends one wake-up per type, plus one more per batch_size due jobs up to
-- max_fanout, plus a due-time hint only when it is earlier than the one already sent. Across
-- transactions, the first due-now wake-up of a transaction is sent only when _wake_needed says so
-- (0010: none while a worker drains the type, at most one a second otherwise).
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
            if v_calls > 0 or {{ s }}._wake_needed(p_type) then
                perform {{ s }}._send_wake(p_type, v_want - v_calls);
            end if;
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

alter table {{ s }}.wake_nonces enable row level security;
alter table {{ s }}.wake_drains enable row level security;
alter table {{ s }}.wake_sent enable row level security;
revoke all on {{ s }}.wake_nonces, {{ s }}.wake_drains, {{ s }}.wake_sent from public;
revoke all on function {{ s }}.consume_wake(text, timestamptz) from public;
revoke all on function {{ s }}.wake_draining(text, interval) from public;
revoke all on function {{ s }}.wake_idle(text, boolean) from public;
revoke all on function {{ s }}._wake_needed(text) from public;
{% include "grants.sql" %}
