-- The public API: the built-in schedules
-- sql/functions/60_sweeps.sql: the stuck sweep, the dead sweep and pruning, which pg_cron runs.
-- Applied in file-name order (after 50_operate.sql, before 70_wake.sql); sql/functions/README.md says how deploy applies these files.

-- Processing jobs whose lease expired: back to pending with backoff while their round has attempts
-- left, else failed (and waiters are notified), so every job reaches a state. The worker is told
-- when the retries are due. It also sweeps the workers that stopped beating (sweep_workers,
-- 75_workers.sql).
create or replace function {{ s }}.sweep_stuck() returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_statuses text[];
    v_types text[];
    v_due timestamptz[];
    v_parents uuid[];
    r record;
begin
    perform {{ s }}.sweep_waits();  -- waits nothing resolved (a lost wake-up): 47_waits.sql
    perform {{ s }}.sweep_workers();
    perform {{ s }}.move_row_inbox();  -- row triggers' staged rows whose wake-up was lost (72_row_inbox.sql)
    with expired as (
        select e.id, {{ s }}.attempt_limit(e.max_attempts, e.handler_max_attempts,
                                          coalesce(t.max_attempts, d.max_attempts)) as round_limit
        from {{ s }}.jobs e
        cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
        left join {{ s }}.job_types t on t.type = e.type
        where e.id = any (array(
            select l.id from {{ s }}.jobs l
            where l.status = 'processing' and l.lease_expires_at < now()
            for update of l skip locked
        ))
    ), changed as (
        update {{ s }}.jobs j
        set status = case when j.attempts - j.round_start < x.round_limit then 'pending' else 'failed' end,
            scheduled_for = case when j.attempts - j.round_start < x.round_limit
                then now() + {{ s }}.backoff(j.type, j.attempts - j.round_start) else j.scheduled_for end,
            completed_at = case when j.attempts - j.round_start < x.round_limit then null else now() end,
            last_error = format('lease expired at %s (worker %s)', j.lease_expires_at, j.worker_id),
            lease_expires_at = null, updated_at = now()
        from expired x
        where j.id = x.id and j.status = 'processing' and j.lease_expires_at < now()
        returning j.id, j.status, j.type, j.scheduled_for, j.attempts, j.worker_id, j.started_at, j.last_error,
                  j.flow_id
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at, 'lease_expired', c.last_error from changed c
    )
    select array_agg(c.id), array_agg(c.status), array_agg(c.type), array_agg(c.scheduled_for),
           array_agg(c.id) filter (where c.flow_id is not null and c.status = 'failed')
    into v_ids, v_statuses, v_types, v_due, v_parents from changed c;
    if v_parents is not null then  -- failed jobs of a graph: their children's policies apply
        perform {{ s }}._settle_children(v_parents);
    end if;
    perform {{ s }}._sweep_blocked();  -- the backstop: no job stays blocked after its parents ended
    for r in select u.type, min(u.due) as due from unnest(v_types, v_due, v_statuses) as u(type, due, status)
             where u.status = 'pending' group by u.type loop
        perform {{ s }}._wake_for(r.type, 0, r.due);
    end loop;
    if 'failed' = any (v_statuses) then
        perform {{ s }}._notify_done(array(
            select u.id from unnest(v_ids, v_statuses) as u(id, status) where u.status = 'failed'));
    end if;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- Dead-letter failed jobs; returns how many moved.
create or replace function {{ s }}.sweep_dead() returns bigint
language sql volatile set search_path = '' as $$
    with moved as (
        update {{ s }}.jobs j set status = 'dead', updated_at = now()
        where j.id = any (array(
            select f.id from {{ s }}.jobs f where f.status = 'failed' for update skip locked
        ))
          and j.status = 'failed'
        returning 1
    )
    select count(*) from moved
$$;

-- Delete finished jobs (completed, dead, cancelled) older than p_older_than, with their attempt
-- history, p_batch_size rows per statement; rows another session holds are skipped, never waited on.
-- Stops after p_max_batches. Returns the number of jobs deleted.
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
    delete from {{ s }}.waiters w where w.expires_at < now();  -- waiters that gave up (0014)
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
        delete from {{ s }}.job_steps t where t.job_id = any (v_ids);
        delete from {{ s }}.job_edges e where e.child_id = any (v_ids);
        v_total := v_total + cardinality(v_ids);
        exit when cardinality(v_ids) < p_batch_size;
    end loop;
    -- flows none of whose jobs is left (0020)
    delete from {{ s }}.flows f
    where f.created_at < now() - p_older_than
      and not exists (select 1 from {{ s }}.jobs j where j.flow_id = f.id);
    return v_total;
end
$$;

-- Delete wake records older than p_older_than; returns how many.
create or replace function {{ s }}.prune_wakeups(p_older_than interval) returns bigint
language sql volatile set search_path = '' as $$
    with gone as (
        delete from {{ s }}.wakeups w where w.created_at < now() - p_older_than returning 1
    )
    select count(*) from gone
$$;
