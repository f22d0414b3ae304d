-- The public API: live workers
-- sql/functions/75_workers.sql: worker presence (0021): the heartbeat upsert, the clean shutdown's mark, the sweep of workers that stopped beating, and each worker's state.
-- Applied in file-name order (after 72_row_inbox.sql, before 80_rate_limits.sql); sql/functions/README.md says how deploy applies these files.

-- A worker's state: 'gone' once its shutdown or the sweep marked it, 'stale' once it has missed
-- three heartbeats (at least 10 seconds), else 'alive'.
create or replace function {{ s }}.worker_state(p_last_seen timestamptz, p_heartbeat interval, p_gone_at timestamptz)
returns text language sql stable set search_path = '' as $$
    select case
        when p_gone_at is not null then 'gone'
        when p_last_seen < pg_catalog.now() - greatest(p_heartbeat * 3, interval '10 seconds') then 'stale'
        else 'alive'
    end
$$;

-- A worker's heartbeat: one upsert of its own row (registering it on the first beat, and again
-- after the sweep marked it gone while the database was out of its reach).
create or replace function {{ s }}.worker_beat(
    p_id text, p_host text, p_pid int, p_version text, p_transport text, p_concurrency int,
    p_types text[], p_running int, p_heartbeat interval, p_started_at timestamptz
) returns void
language sql volatile set search_path = '' as $$
    insert into {{ s }}.workers as w (id, host, pid, version, transport, concurrency, types, running,
                                      heartbeat, started_at, last_seen)
    values (p_id, p_host, p_pid, p_version, p_transport, p_concurrency, coalesce(p_types, '{}'),
            greatest(p_running, 0), p_heartbeat, p_started_at, pg_catalog.now())
    on conflict (id) do update
    set running = excluded.running, last_seen = excluded.last_seen, types = excluded.types,
        concurrency = excluded.concurrency, heartbeat = excluded.heartbeat, gone_at = null,
        gone_reason = null
$$;

-- A worker's clean shutdown: its row is marked gone (the sweep deletes it an hour later).
create or replace function {{ s }}.worker_gone(p_id text) returns void
language sql volatile set search_path = '' as $$
    update {{ s }}.workers w
    set gone_at = pg_catalog.now(), gone_reason = 'stopped', running = 0
    where w.id = p_id and w.gone_at is null
$$;

-- Mark gone the workers that missed their heartbeats; delete the rows gone for an hour. Run by
-- sweep_stuck (every minute by default). Returns how many it marked.
create or replace function {{ s }}.sweep_workers() returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_marked int;
begin
    update {{ s }}.workers w
    set gone_at = pg_catalog.now(), gone_reason = 'missed heartbeats'
    where w.gone_at is null and {{ s }}.worker_state(w.last_seen, w.heartbeat, w.gone_at) = 'stale';
    get diagnostics v_marked = row_count;
    delete from {{ s }}.workers w where w.gone_at < pg_catalog.now() - interval '1 hour';
    return v_marked;
end
$$;

-- Every worker with its state, for the dashboard, `jobkit status`, doctor and /metrics.
create or replace function {{ s }}.workers_now() returns table (
    id text, host text, pid int, version text, transport text, concurrency int, types text[], running int,
    heartbeat interval, started_at timestamptz, last_seen timestamptz, gone_at timestamptz,
    gone_reason text, state text
)
language sql stable set search_path = '' as $$
    select w.id, w.host, w.pid, w.version, w.transport, w.concurrency, w.types, w.running, w.heartbeat,
           w.started_at, w.last_seen, w.gone_at, w.gone_reason,
           {{ s }}.worker_state(w.last_seen, w.heartbeat, w.gone_at)
    from {{ s }}.workers w
$$;
