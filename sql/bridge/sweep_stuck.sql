-- Upgrade bridge, step for a deployment whose 0005_delivery is the first one (main at
-- 4fd40c1..735b29e): the later 0005_delivery (bfdb5ad) changed only sweep_stuck, which now tells the
-- worker when the retries it makes are due. The function is replaced as that migration replaced it.

-- Processing jobs whose lease expired: back to pending with backoff while the round has attempts
-- left, else failed. Every such job reaches a state. The worker is told when the retries are due.
drop function {{ s }}.sweep_stuck();
create function {{ s }}.sweep_stuck() returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_statuses text[];
    v_types text[];
    v_due timestamptz[];
    r record;
begin
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
        returning j.id, j.status, j.type, j.scheduled_for, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at, 'lease_expired', c.last_error from changed c
    )
    select array_agg(c.id), array_agg(c.status), array_agg(c.type), array_agg(c.scheduled_for)
    into v_ids, v_statuses, v_types, v_due from changed c;
    for r in select u.type, min(u.due) as due from unnest(v_types, v_due, v_statuses) as u(type, due, status)
             where u.status = 'pending' group by u.type loop
        perform {{ s }}._wake_for(r.type, 0, r.due);
    end loop;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
