-- jobkit 0002: the database wakes the worker. Runtime settings, the worker's URL and token (Vault
-- or a private table), wake() over pg_net or NOTIFY, the statement-level insert trigger, wake
-- records reconciled with pg_net's responses, and the housekeeping the built-in schedules call.

-- Runtime settings, synced from jobkit.toml by `jobkit deploy` (values are jsonb).
create table {{ s }}.settings (
    key        text primary key,
    value      jsonb not null,
    updated_at timestamptz not null default now()
);
insert into {{ s }}.settings (key, value) values
    ('transport', '"notify"'),         -- 'pg_net' or 'notify'; deploy resolves 'auto'
    ('wake_timeout_ms', '5000'),       -- pg_net timeout_milliseconds, always passed explicitly
    ('max_fanout', '4'),               -- most worker calls one wake-up may start
    ('batch_size', '100'),             -- jobs one worker call is asked to run (max_jobs)
    ('budget_ms', '25000'),            -- time budget one worker call is given
    ('channel', {{ (schema ~ "_wake") | tojson | literal }});

-- Per type: whether an insert wakes the worker at once (the cron wake-up stays as the backup).
alter table {{ s }}.job_types add column wake_on_insert boolean not null default true;

-- The worker URL and bearer token when Supabase Vault is absent. Only the owner and service_role
-- can read it; Vault is used instead whenever vault.decrypted_secrets exists.
create table {{ s }}.secrets (
    name       text primary key,
    value      text not null,
    updated_at timestamptz not null default now()
);

-- One row per wake-up sent. pg_net answers asynchronously and keeps responses 6 hours only, so
-- reconcile_wakeups() copies each outcome here: delivered (2xx), failed (other status or a
-- connection error), timed_out (outcome unknown: pg_net timeouts can still deliver), unanswered
-- (no response row long after the timeout). NOTIFY wake-ups have no answer and are not recorded.
create table {{ s }}.wakeups (
    id          bigint generated always as identity primary key,
    type        text not null,
    transport   text not null check (transport in ('pg_net', 'notify')),
    request_id  bigint,
    created_at  timestamptz not null default now(),
    outcome     text check (outcome in ('delivered', 'failed', 'timed_out', 'unanswered', 'notified')),
    status_code int,
    error       text,
    checked_at  timestamptz
);
create index wakeups_open_idx on {{ s }}.wakeups (request_id) where outcome is null;
create index wakeups_created_idx on {{ s }}.wakeups (created_at);

-- A setting's value.
create function {{ s }}.setting(p_key text) returns jsonb
language sql stable set search_path = '' as $$
    select value from {{ s }}.settings where key = p_key
$$;

-- A secret by jobkit name ('worker_url', 'worker_token'): Vault's '<schema>_<name>' when Vault is
-- installed, else the private table. Never logged, never part of any cron command.
create function {{ s }}.secret(p_name text) returns text
language plpgsql stable security definer set search_path = '' as $$
declare
    v_value text;
begin
    if to_regclass('vault.decrypted_secrets') is not null then
        select d.decrypted_secret into v_value from vault.decrypted_secrets d
        where d.name = {{ schema | literal }} || '_' || p_name;
        if v_value is not null then
            return v_value;
        end if;
    end if;
    select s.value into v_value from {{ s }}.secrets s where s.name = p_name;
    return v_value;
end
$$;

-- Wake the worker for one type when it has runnable work: over pg_net, up to
-- ceil(backlog / batch_size) concurrent calls capped by p_max_calls (default: max_fanout); over
-- NOTIFY, one notification for the listening workers. Returns the number of calls made. It never
-- raises: a wake-up that cannot be sent is recorded as failed (and the cron backup tries again).
create function {{ s }}.wake(p_type text, p_max_calls int default null) returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_batch int := ({{ s }}.setting('batch_size'))::int;
    v_cap int := greatest(coalesce(p_max_calls, ({{ s }}.setting('max_fanout'))::int), 1);
    v_backlog bigint;
begin
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

-- Send p_calls wake-ups for a type known to have due jobs, over the configured transport.
create function {{ s }}._send_wake(p_type text, p_calls int) returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_batch int := ({{ s }}.setting('batch_size'))::int;
begin
    if ({{ s }}.setting('transport')) #>> '{}' = 'pg_net' then
        return {{ s }}._wake_http(p_type, p_calls, v_batch);
    end if;
    -- NOTIFY has no answer to reconcile, so it is not recorded in wakeups (that would cost a row
    -- per enqueue); it is delivered at commit, and duplicates within a transaction fold into one.
    perform pg_notify(({{ s }}.setting('channel')) #>> '{}',
                      json_build_object('type', p_type, 'calls', p_calls, 'max_jobs', v_batch)::text);
    return 1;
end
$$;

create function {{ s }}._wake_http(p_type text, p_calls int, p_batch int) returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_url text := {{ s }}.secret('worker_url');
    v_token text := {{ s }}.secret('worker_token');
    v_request bigint;
begin
    if v_url is null or v_token is null then
        insert into {{ s }}.wakeups (type, transport, outcome, error, checked_at)
        values (p_type, 'pg_net', 'failed', 'worker URL or token not set: run `jobkit secrets set`', now());
        return 0;
    end if;
    for i in 1 .. p_calls loop
        v_request := net.http_post(
            url := v_url,
            body := jsonb_build_object('type', p_type, 'max_jobs', p_batch,
                                       'budget_ms', ({{ s }}.setting('budget_ms'))::int),
            params := '{}'::jsonb,
            headers := jsonb_build_object('Content-Type', 'application/json',
                                          'Authorization', 'Bearer ' || v_token),
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

-- Every type that has pending jobs, by a skip scan over jobs_due_idx (one index probe per type,
-- however many jobs are pending).
create function {{ s }}.pending_types() returns setof text
language sql stable set search_path = '' as $$
    with recursive t(type) as (
        (select j.type from {{ s }}.jobs j where j.status = 'pending' order by j.type limit 1)
        union all
        select (select j.type from {{ s }}.jobs j
                where j.status = 'pending' and j.type > t.type order by j.type limit 1)
        from t where t.type is not null
    )
    select t.type from t where t.type is not null
$$;

-- Wake every type with due work. The cron backup calls this; it first records the outcome of
-- earlier wake-ups.
create function {{ s }}.wake_all() returns int
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

-- The fast path: after each INSERT statement, wake once per type that got runnable jobs (the
-- inserted rows are the backlog evidence: no count needed).
create function {{ s }}.jobs_wake_on_insert() returns trigger
language plpgsql security definer set search_path = '' as $$
declare
    v_type text;
begin
    for v_type in
        select distinct n.type from new_jobs n
        where n.status = 'pending' and n.scheduled_for <= now()
    loop
        if ({{ s }}.type_settings(v_type)).wake_on_insert then
            perform {{ s }}._send_wake(v_type, 1);
        end if;
    end loop;
    return null;
end
$$;

create trigger jobs_wake_on_insert after insert on {{ s }}.jobs
    referencing new table as new_jobs
    for each statement execute function {{ s }}.jobs_wake_on_insert();

-- Copy pg_net's answers into wakeups before pg_net's TTL deletes them. Returns rows settled.
create function {{ s }}.reconcile_wakeups(p_unanswered_after interval default '10 minutes')
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

-- Delete wake records older than p_older_than; returns how many.
create function {{ s }}.prune_wakeups(p_older_than interval) returns bigint
language sql volatile set search_path = '' as $$
    with gone as (
        delete from {{ s }}.wakeups w where w.created_at < now() - p_older_than returning 1
    )
    select count(*) from gone
$$;

alter table {{ s }}.settings enable row level security;
alter table {{ s }}.secrets enable row level security;
alter table {{ s }}.wakeups enable row level security;
revoke all on all tables in schema {{ s }} from public;
revoke all on all sequences in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}

-- Which of jobkit's cron jobs `jobkit deploy` manages (origin config: declared in jobkit.toml or
-- built in) and which an operator added with `jobkit schedule add` (origin cli, left alone by sync).
create table {{ s }}.schedules (
    name       text primary key,
    origin     text not null check (origin in ('config', 'cli')),
    updated_at timestamptz not null default now()
);
alter table {{ s }}.schedules enable row level security;
revoke all on {{ s }}.schedules from public;
{% include "grants.sql" %}
