-- The public API: the declared row triggers' inbox
-- sql/functions/72_row_inbox.sql: move_row_inbox, which makes the rows declared row triggers staged (0026) into jobs.
-- Applied in file-name order (after 70_wake.sql, before 75_workers.sql); sql/functions/README.md says how deploy applies these files.

-- A declared row trigger ([triggers.<name>], sql/row_trigger.sql) writes one row per changed row into
-- row_inbox, in the changing transaction, and wakes the type's worker once per statement. Here those
-- rows become jobs, off that transaction: up to p_limit staged rows (null: all) of p_type (null:
-- every type; p_trigger: only that trigger's) are deleted and inserted into jobs in one statement.
-- A staged row is one json array of the payload's and the primary key's columns, in the order
-- staged() in sql/row_trigger.sql writes them (past 100 columns, and before stop 33: one object of
-- the same values keyed f1, f2, ...; the row itself for payload "row"); its
-- trigger's row_triggers.spec (its payload, its primary key's columns), read once per trigger, names
-- them and takes them apart into the job's payload and its source (trigger, table, operation,
-- primary key). For a trigger declared with idempotency =
-- "pk" the job's key is "<trigger>:<primary key>": one unfinished job per row and trigger (a row
-- staged again while its job is pending or processing makes no second job). Staged rows another
-- mover holds are skipped (SKIP LOCKED), so concurrent movers never move a row twice, and the jobs
-- are inserted in key order, so that two movers that meet on keys wait for each other in one order
-- and never deadlock. A rolled-back move leaves its rows staged. The insert fires
-- jobs_wake_on_insert as any enqueue does. Called by claim_jobs for a type that has row triggers
-- (30_claim.sql), by sweep_stuck for every type (60_sweeps.sql: the backstop for a lost wake-up), and
-- by deploy before it removes a trigger. Returns how many staged rows it moved.
create or replace function {{ s }}.move_row_inbox(p_type text default null, p_limit int default null,
                                                  p_trigger text default null)
returns int
language sql volatile set search_path = '' as $$
    with staged as (
        delete from {{ s }}.row_inbox i
        where i.ctid = any (array(
            select x.ctid from {{ s }}.row_inbox x
            where (p_type is null or x.type = p_type) and (p_trigger is null or x.name = p_trigger)
            limit p_limit
            for update skip locked
        ))
        returning i.ctid as id, i.name, i.op, i.type, i.staged::jsonb as staged, i.staged_at
    ), specs as (  -- per trigger, once: how its staged object splits into payload and primary key
        select g.name, g.op, g.table_name, g.spec ->> 'idempotency' = 'pk' as keyed,
               g.spec ->> 'payload' = 'row' as whole, g.spec -> 'pk' as pk,
               -- the staged array's elements (or object's keys f1, f2, ...) are these columns (staged())
               case when g.spec ->> 'payload' = 'row' then null else array(
                   select c.k from (
                       select p.k, p.n from jsonb_array_elements_text(
                           case when jsonb_typeof(g.spec -> 'payload') = 'array' then g.spec -> 'payload'
                                else '[]' end) with ordinality p(k, n)
                       union all
                       select p.k, 1000 + p.n from jsonb_array_elements_text(g.spec -> 'pk') with ordinality p(k, n)
                       where not (case when jsonb_typeof(g.spec -> 'payload') = 'array' then g.spec -> 'payload'
                                       else '[]' end) ? p.k
                   ) c order by c.n) end as names,
               case when jsonb_typeof(g.spec -> 'payload') = 'array' then array(
                   select k from jsonb_array_elements_text(g.spec -> 'pk') k
                   where not (g.spec -> 'payload') ? k)
               else '{}' end as not_payload,
               case when jsonb_typeof(g.spec -> 'payload') = 'array' then array(
                   select k from jsonb_array_elements_text(g.spec -> 'payload') k
                   where not (g.spec -> 'pk') ? k)
               else '{}' end as not_pk
        from {{ s }}.row_triggers g
        where g.name in (select distinct x.name from staged x)
    ), renamed as (  -- named in one aggregate over the batch (a subquery a row: +29 k Ir a row)
        select x.id, jsonb_object_agg(n.k, case when jsonb_typeof(x.staged) = 'array' then x.staged -> (n.i::int - 1)
                                                else x.staged -> ('f' || n.i) end) as staged
        from staged x
        join specs g on g.name = x.name and g.op = x.op
        cross join lateral unnest(g.names) with ordinality n(k, i)
        group by x.id
    ), named as (
        select x.type, x.name, x.op, x.staged_at, g.table_name, g.keyed, g.whole, g.pk, g.not_payload, g.not_pk,
               coalesce(m.staged, x.staged) as staged  -- payload "row" (or no spec, never kept): as staged
        from staged x
        left join specs g on g.name = x.name and g.op = x.op
        left join renamed m on m.id = x.id
    ), split as (
        select x.type, x.name, x.op, x.staged_at, x.table_name, x.keyed,
               x.staged - coalesce(x.not_payload, '{}') as payload,
               case when x.whole
                    then (select jsonb_object_agg(k, x.staged -> k) from jsonb_array_elements_text(x.pk) k)
                    else x.staged - x.not_pk end as pk
        from named x
    ), shaped as (
        select x.type, x.staged_at, x.payload,
               jsonb_build_object('trigger', x.name, 'table', x.table_name, 'op', x.op, 'pk', x.pk) as source,
               case when x.keyed then x.name || ':' || x.pk::text end as idempotency_key
        from split x
    ), made as (
        insert into {{ s }}.jobs (type, payload, idempotency_key, concurrency_key, source, created_at)
        select x.type, x.payload, x.idempotency_key,
               coalesce(case when t.key_template is not null then {{ s }}._render_key(t.key_template, x.payload) end,
                        case when t.fair then '' end),
               x.source, x.staged_at
        from shaped x
        left join {{ s }}.job_types t on t.type = x.type
        order by x.type, x.idempotency_key
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
    )
    select count(*)::int from staged
$$;
