{#- Shared SQL fragments, imported by more than one file (`{% from "shared/steps.sql" import ... with context %}`).
    Written once here, so that the two places that write steps' records cannot drift apart. Every
    operator and function is qualified: the fragment runs inside a function with an empty
    search_path and as a worker query under the connection's own (toolkit/queries.py). -#}

{#- Steps' records of running attempts, fenced: each record is inserted only while its own attempt
    holds its job (processing, attempts unchanged), probed through a lateral subquery, one primary-
    key probe of jobs per record, so that a kept generic plan stays a nested loop whatever the
    table's statistics said when it was made (no fence CTE, bitmap scan or hash join to start per
    statement); a plain insert (a record that meets a stored one makes the primary key refuse the
    statement). `held` is the (id, attempts) of the records written: a job once per record. One
    function scan (`names_scan`, the one array of variable width); the fixed-width arrays are read
    by subscript. The caller ends the statement with its own `select ... from held h`. Used by
    save_steps' usual batch (sql/functions/45_steps.sql, the Data API's path) and by the worker's
    save_steps_direct (sql/queries/worker.sql), whose `names_scan` hides the arrays' length from the
    planner (see there). -#}
{% macro fenced_steps_insert(ids, attempts, names_scan, occurrences, results, errors, tries, started_at) -%}
with held as (
    insert into {{ s }}.job_steps as t (job_id, name, occurrence, attempt, status, result, error, tries, started_at)
    select h.id, u.name, ({{ occurrences }})[u.i], h.attempts,
           case when ({{ errors }})[u.i] is null then 'completed' else 'failed' end,
           case when ({{ errors }})[u.i] is null
                 and pg_catalog.jsonb_typeof({{ results }}
                     operator(pg_catalog.->) (u.i::int operator(pg_catalog.-) 1)) operator(pg_catalog.<>) 'null'
                then {{ results }} operator(pg_catalog.->) (u.i::int operator(pg_catalog.-) 1) end,
           ({{ errors }})[u.i], greatest(coalesce(({{ tries }})[u.i], 1), 1),
           coalesce(({{ started_at }})[u.i], pg_catalog.now())
    from pg_catalog.unnest({{ names_scan }}) with ordinality as u(name, i)
    cross join lateral (
        select j.id, j.attempts from {{ s }}.jobs j
        where j.id operator(pg_catalog.=) ({{ ids }})[u.i]
          and j.attempts operator(pg_catalog.=) ({{ attempts }})[u.i]
          and j.status operator(pg_catalog.=) 'processing'
        offset 0
    ) h
    returning t.job_id as id, t.attempt as attempts
)
{%- endmacro %}

{#- Jobs' completed steps (what a retry returns instead of running them again): one probe of
    job_steps' primary key per distinct job through a lateral subquery, so that a kept generic plan
    stays a nested loop whatever the table's statistics said when it was made. Each job's steps come
    once, however often its id is given. Used by load_steps (sql/functions/45_steps.sql, the Data
    API's path) and the worker's load_steps query (sql/queries/worker.sql). -#}
{% macro completed_steps(ids) -%}
select t.job_id, t.name, t.occurrence, t.result
from (select distinct u.id from pg_catalog.unnest({{ ids }}) as u(id)) p
cross join lateral (
    select s.job_id, s.name, s.occurrence, s.result from {{ s }}.job_steps s
    where s.job_id operator(pg_catalog.=) p.id and s.status operator(pg_catalog.=) 'completed'
    offset 0
) t
{%- endmacro %}
