-- The public API: the declared row triggers' inbox
-- sql/functions/72_row_inbox.sql: move_row_inbox, which makes the rows declared row triggers staged (0026) into jobs.
-- Applied in file-name order (after 70_wake.sql, before 75_workers.sql); sql/functions/README.md says how deploy applies these files.

-- A declared row trigger ([triggers.<name>], sql/row_trigger.sql) writes one row per changed row into
-- row_inbox, in the changing transaction, and wakes the type's worker once per statement. Here those
-- rows become jobs, off that transaction: up to p_limit staged rows (null: all) of p_type (null:
-- every type) are deleted and inserted into jobs in one statement, each with its source (trigger,
-- table, operation, primary key) and, for a trigger declared with idempotency = "pk", the key
-- "<trigger>:<primary key>" (one unfinished job per row and trigger: a row staged again while its
-- job is pending or processing makes no second job). Staged rows another mover holds are skipped
-- (SKIP LOCKED), so concurrent movers never move a row twice; a rolled-back move leaves its rows
-- staged. The jobs' insert fires jobs_wake_on_insert as any enqueue does. Called by claim_jobs for
-- a type that has row triggers (30_claim.sql) and by sweep_stuck for every type (60_sweeps.sql),
-- the backstop for a lost wake-up. Returns how many staged rows it moved.
create or replace function {{ s }}.move_row_inbox(p_type text default null, p_limit int default null)
returns int
language sql volatile set search_path = '' as $$
    with staged as (
        delete from {{ s }}.row_inbox i
        where i.ctid = any (array(
            select x.ctid from {{ s }}.row_inbox x
            where p_type is null or x.type = p_type
            limit p_limit
            for update skip locked
        ))
        returning i.name, i.op, i.type, i.pk, i.payload, i.staged_at
    ), made as (
        insert into {{ s }}.jobs (type, payload, idempotency_key, concurrency_key, source, created_at)
        select x.type, x.payload,
               case when g.spec ->> 'idempotency' = 'pk' then x.name || ':' || x.pk::text end,
               coalesce(case when t.key_template is not null then {{ s }}._render_key(t.key_template, x.payload) end,
                        case when t.fair then '' end),
               jsonb_build_object('trigger', x.name, 'table', g.table_name, 'op', x.op, 'pk', x.pk),
               x.staged_at
        from staged x
        left join {{ s }}.row_triggers g on g.name = x.name and g.op = x.op
        left join {{ s }}.job_types t on t.type = x.type
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
    )
    select count(*)::int from staged
$$;
