-- The public API: durable steps (ctx.step, issue 25)
-- sql/functions/45_steps.sql: jobs' completed steps read back on a retry, and steps' records written fenced by their attempts.
-- Applied in file-name order (after 40_finish.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.
{% from "shared/steps.sql" import completed_steps, fenced_steps_insert with context %}

-- The completed steps of these jobs: what a retry (or, later, a replay after a wait) returns
-- instead of running them again. Failed steps are not returned: they run again. The worker reads
-- the first steps of many jobs in one statement (group commit).
create or replace function {{ s }}.load_steps(p_ids uuid[])
returns table (job_id uuid, name text, occurrence int, result jsonb)
language plpgsql stable set search_path = '' set plan_cache_mode = force_generic_plan as $$
begin
    -- plpgsql, so that its plan is kept (a SQL function with a pinned search_path is not inlined
    -- and planned its query on every call); one primary-key probe per job through a lateral
    -- subquery, so that the kept generic plan does not scan the table whatever its statistics
    -- said when it was made (sql/shared/steps.sql: the worker's load_steps query runs the same text).
    return query
    {{ completed_steps(ids="p_ids") | indent(4) }};
end
$$;

-- Whether one of these step names is longer than 200 characters (save_steps' check, run only when
-- the names together are longer than that).
create or replace function {{ s }}._long_step_name(p_names text[]) returns boolean
language sql immutable set search_path = '' as $$
    select exists (select 1 from unnest(p_names) as n(name) where pg_catalog.char_length(n.name) > 200)
$$;

-- Record steps of running attempts, many in one statement (the worker's group commit): each is
-- completed (its error null; p_results is a JSON array parallel to p_ids, null for all-null) or
-- failed (its error kept for debugging; it runs again on the next attempt). Fenced: a record is
-- written only while its attempt holds its job (processing, attempts unchanged) as of the
-- statement's snapshot; returns the (job id, attempt) pairs that held their job. A completed row
-- is never overwritten.
-- p_hold (transactional steps): the held jobs' rows are also locked FOR SHARE until the caller's
-- transaction ends, so a sweep or a cancel that moves a job on waits for that transaction, or
-- was seen by it: the step's work commits only while its attempt holds the job. Plain steps do
-- not lock (it costs each step a tuple lock on its job's row): a sweep that commits while their
-- statement runs can let a stale attempt's record of a step that did run and return land; it is
-- kept like any completed step (the next attempt returns it instead of running the step again),
-- and that attempt's own completion is still fenced out.
create or replace function {{ s }}.save_steps(
    p_ids uuid[], p_attempts int[], p_names text[], p_occurrences int[], p_results jsonb,
    p_errors text[], p_tries int[], p_started_at timestamptz[], p_hold boolean default false
) returns table (id uuid, attempt int)
language plpgsql volatile set search_path = '' set plan_cache_mode = force_generic_plan as $$
declare
    v_n int := coalesce(pg_catalog.cardinality(p_ids), 0);
    v_held uuid[];
    v_attempts int[];
begin
    if pg_catalog.cardinality(p_attempts) is distinct from v_n
       or pg_catalog.cardinality(p_names) is distinct from v_n
       or pg_catalog.cardinality(p_occurrences) is distinct from v_n
       or (p_results is not null and (pg_catalog.jsonb_typeof(p_results) <> 'array'
                                      or pg_catalog.jsonb_array_length(p_results) <> v_n))
       or (p_errors is not null and pg_catalog.cardinality(p_errors) <> v_n)
       or (p_tries is not null and pg_catalog.cardinality(p_tries) <> v_n)
       or (p_started_at is not null and pg_catalog.cardinality(p_started_at) <> v_n) then
        raise exception 'jobkit.save_steps: every array must be as long as p_ids'
            using errcode = '22023', hint = 'pass one element per step record';
    end if;
    -- Simple expressions (no query to plan and start); a name's length is looked at one by one only
    -- when the names together are longer than one may be.
    if pg_catalog.array_position(p_names, null) is not null or '' = any (p_names)
       or pg_catalog.array_position(p_occurrences, null) is not null or 1 > any (p_occurrences)
       or (pg_catalog.octet_length(pg_catalog.array_to_string(p_names, '')) > 200
           and {{ s }}._long_step_name(p_names)) then
        raise exception 'jobkit.save_steps: a step needs a name of 1 to 200 characters and an occurrence >= 1'
            using errcode = '22023', hint = 'call ctx.step("name", fn) with a short, non-empty name';
    end if;
    if not p_hold then
        -- held: the (id, attempts) of the records written, each only while its own attempt holds
        -- its job (the insert's probe of jobs); a job once in the answer. The usual case,
        -- records of steps never stored, is a plain insert (no ON CONFLICT: no probe of the primary
        -- key before each row, no sort to keep one record per key); a record that meets a stored
        -- one (a failed step run again, a record sent again, a key twice in the batch) makes the
        -- primary key refuse it, and the batch is written again (the insert undone) as below.
        begin
            -- the fenced insert (sql/shared/steps.sql), the same text the worker's save_steps_direct runs
            {{ fenced_steps_insert(ids="p_ids", attempts="p_attempts", names_scan="p_names",
                                   occurrences="p_occurrences", results="p_results", errors="p_errors",
                                   tries="p_tries", started_at="p_started_at") | indent(12) }}
            select pg_catalog.array_agg(h.id), pg_catalog.array_agg(h.attempts) into v_held, v_attempts
            from (select distinct h.id, h.attempts from held h) h;
        exception when unique_violation then
            -- the last record of a key in the batch wins; a completed row is never overwritten
            with held as (
                select j.id, j.attempts from {{ s }}.jobs j
                where j.id = any (p_ids) and j.status = 'processing' and j.attempts = any (p_attempts)
            ), stored as (
                insert into {{ s }}.job_steps as t
                    (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
                select distinct on (u.id, u.name, u.occurrence)
                       u.id, u.name, u.occurrence, u.attempt,
                       case when p_errors[u.i] is null then 'completed' else 'failed' end,
                       case when p_errors[u.i] is null then nullif(p_results -> (u.i::int - 1), 'null'::jsonb) end,
                       p_errors[u.i], greatest(coalesce(p_tries[u.i], 1), 1), coalesce(p_started_at[u.i], now())
                from unnest(p_ids, p_attempts, p_names, p_occurrences)
                     with ordinality as u(id, attempt, name, occurrence, i)
                join held h on h.id = u.id and h.attempts = u.attempt
                order by u.id, u.name, u.occurrence, u.i desc
                on conflict (job_id, name, occurrence) do update
                    set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
                        error = excluded.error, tries = excluded.tries, started_at = excluded.started_at,
                        finished_at = now()
                    where t.status <> 'completed'
            )
            select pg_catalog.array_agg(h.id), pg_catalog.array_agg(h.attempts) into v_held, v_attempts
            from held h;
        end;
        return query select h.id, h.attempt from unnest(v_held, v_attempts) as h(id, attempt);
        return;
    end if;
    select pg_catalog.array_agg(h.id), pg_catalog.array_agg(h.attempts) into v_held, v_attempts from (
        select j.id, j.attempts from {{ s }}.jobs j
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = any (select u.attempt from unnest(p_ids, p_attempts) as u(id, attempt)
                                where u.id = j.id)
        for share
    ) h;
    if v_held is null then
        return;
    end if;
    insert into {{ s }}.job_steps as t
        (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
    select distinct on (u.id, u.name, u.occurrence)
           u.id, u.name, u.occurrence, u.attempt,
           case when p_errors[u.i] is null then 'completed' else 'failed' end,
           case when p_errors[u.i] is null then nullif(p_results -> (u.i::int - 1), 'null'::jsonb) end,
           p_errors[u.i], greatest(coalesce(p_tries[u.i], 1), 1), coalesce(p_started_at[u.i], now())
    from unnest(p_ids, p_attempts, p_names, p_occurrences)
         with ordinality as u(id, attempt, name, occurrence, i)
    where u.attempt = v_attempts[pg_catalog.array_position(v_held, u.id)]
    order by u.id, u.name, u.occurrence, u.i desc
    on conflict (job_id, name, occurrence) do update
        set attempt = excluded.attempt, status = excluded.status, result = excluded.result,
            error = excluded.error, tries = excluded.tries, started_at = excluded.started_at,
            finished_at = now()
        where t.status <> 'completed';
    return query select h.id, h.attempt from unnest(v_held, v_attempts) as h(id, attempt);
end
$$;
