{#- A declared row trigger ([triggers.<name>] in jobkit.toml) for one operation, rendered by
    toolkit/schema/triggers.py in three parts: "trial" (only the select, over typed nulls shaped
    like the table, for deploy's rolled-back check of `when` and the payload: no privilege on the
    table needed), "function" (the trigger function) and "trigger" (the CREATE TRIGGER).
    With pk = none (`jobkit render`: no database to read it from) the parts that depend on the
    table's primary key or columns are left as /*jobkit:...*/ tokens, which
    sql/row_triggers_apply.sql fills in from the catalog when it runs, to the same text. -#}
{%- set alias = "old" if op == "delete" else "new" -%}
{%- set trial = part == "trial" -%}
{#- a job trigger stages json (text, checked only: cheaper to build than jsonb per row), an emit trigger's
    _emit_many takes jsonb -#}
{%- set j = "jsonb" if emit else "json" -%}
{%- macro object(rel, cols) -%}
pg_catalog.{{ j }}_build_object({% for c in cols %}{{ c | literal }}, {{ rel }}.{{ c | ident }}{% if not loop.last %}, {% endif %}{% endfor %})
{%- endmacro -%}
{%- macro pk_object(rel) -%}
{%- if pk is none %}/*jobkit:pk_{{ "object" if emit else "json" }}:{{ rel }}*/{% else %}{{ object(rel, pk) }}{% endif -%}
{%- endmacro -%}
{%- macro pk_key(rel) -%}
{%- if pk is none %}/*jobkit:pk_key:{{ rel }}*/{% elif pk | length == 1 %}{{ rel }}.{{ pk[0] | ident }}::pg_catalog.text{% else %}pg_catalog.jsonb_build_array({% for c in pk %}{{ rel }}.{{ c | ident }}{% if not loop.last %}, {% endif %}{% endfor %})::pg_catalog.text{% endif -%}
{%- endmacro -%}
{%- macro pk_join() -%}
{%- if pk is none %}/*jobkit:pk_join*/{% else %}{% for c in pk %}new.{{ c | ident }} operator(pg_catalog.=) old.{{ c | ident }}{% if not loop.last %} and {% endif %}{% endfor %}{% endif -%}
{%- endmacro -%}
{%- macro shaped(rel) -%}
{%- if columns is none %}/*jobkit:shaped:{{ rel }}*/{% else -%}
(select {% for c, t in columns %}null::{{ t }} as {{ c | ident }}{% if not loop.last %}, {% endif %}{% endfor %}) as {{ rel }}
{%- endif -%}
{%- endmacro -%}
{%- macro source(rel) -%}
{%- if trial %}{{ shaped(rel) }}{% else %}jobkit_{{ rel }} as {{ rel }}{% endif -%}
{%- endmacro -%}
{%- macro payload_value() -%}
{% if payload == "row" %}pg_catalog.to_{{ j }}({{ alias }}.*){% elif payload == "pk" %}{{ pk_object(alias) }}{% else %}{{ object(alias, payload) }}{% endif %}
{%- endmacro -%}
{%- macro staged(rel) -%}
{#- a job trigger's staged row: the payload's columns, then the primary key's not among them, as one
    json array (json_build_array: cheaper to build than an object, issue 24 stop 33; json_build_object
    looked up its keys' types on every row too), which the move (sql/functions/72_row_inbox.sql) names
    from row_triggers.spec and takes apart. Past json_build_array's 100 arguments: row_to_json of a ROW,
    an object keyed f1, f2, ... in the same order, which the move reads too; payload "row": the row as json -#}
{%- set cols = ((payload | list) if payload != "pk" else []) + (pk | reject("in", (payload | list) if payload != "pk" else []) | list) if pk is not none else [] -%}
{% if payload == "row" %}pg_catalog.to_json({{ rel }}.*){% elif pk is none %}/*jobkit:staged:{{ rel }}*/{% else %}{% if cols | length <= 100 %}pg_catalog.json_build_array({% else %}pg_catalog.row_to_json(row({% endif %}{% for c in cols %}{{ rel }}.{{ c | ident }}{% if not loop.last %}, {% endif %}{% endfor %}){% if cols | length > 100 %}){% endif %}{% endif %}
{%- endmacro -%}
{%- macro select() -%}
{%- if emit %}
        select {% if key %}{{ alias }}.{{ key | ident }}::pg_catalog.text{% else %}{{ pk_key(alias) }}{% endif %} as key,
               {{ payload_value() }} as payload
{%- else %}
        select {{ staged(alias) }} as staged
{%- endif %}
        from {% if op == "update" %}{{ source("new") }}
        join {{ source("old") }} on {{ pk_join() }}{% else %}{{ source(alias) }}{% endif %}
        where ({{ when or "true" }}
        )
{%- endmacro -%}
{%- if part == "trigger" -%}
create trigger {{ trigger | ident }} after {{ op }} on {{ table_schema | ident }}.{{ table_name | ident }}
    referencing {% if op != "insert" %}old table as jobkit_old {% endif %}{% if op != "delete" %}new table as jobkit_new {% endif %}
    for each statement execute function {{ s }}.{{ fn | ident }}()
{%- elif trial -%}
select * from (
{{ select() }}
) trial limit 0
{%- elif emit -%}
-- [triggers.{{ name }}], {{ op }} on {{ table_label }}: a statement-level AFTER trigger whose transition
-- table(s) feed one call of _emit_many per statement (sql/functions/47_waits.sql), in the statement's
-- transaction: one event of the declared name per row, keyed by {% if key %}column {{ key }}{% else %}the primary key{% endif %} (text; a
-- composite key: the jsonb array of its columns, in key order, as text), its data the declared
-- payload. The waits on those events are resolved and the subscribers' jobs enqueued as for any
-- emit. No HTTP call happens here.
-- SECURITY DEFINER (it runs as jobkit's owner, whoever changes the row), search_path pinned empty:
-- every name below is qualified, except in `when`, the declared condition over new/old.
create or replace function {{ s }}.{{ fn | ident }}() returns trigger
language plpgsql volatile security definer set search_path = '' as {{ tag }}
#variable_conflict use_column
begin
    perform {{ s }}._emit_many({{ emit | literal }}, pg_catalog.array_agg(r.key), pg_catalog.array_agg(r.payload))
    from (
{{ select() }}
    ) r;
    return null;
end
{{ tag }};
revoke all on function {{ s }}.{{ fn | ident }}() from public
{%- else -%}
-- [triggers.{{ name }}], {{ op }} on {{ table_label }}: a statement-level AFTER trigger whose transition
-- table(s) feed one insert into jobkit's row_inbox per statement, in the statement's transaction: a
-- narrow logged row per changed row (the declared payload's and the primary key's columns, one json
-- array: the cheapest to build per row; no index), which
-- move_row_inbox (sql/functions/72_row_inbox.sql) makes into a job off this transaction, when the
-- type's worker claims or the stuck sweep runs. A job row with its index entries cost the inserting
-- transaction 2.8 times a plain app insert (docs/BENCHMARKS.md, issue 24). The statement wakes the
-- type's worker once, through the engine's coalesced path (_wake_for, sql/functions/70_wake.sql).
-- No HTTP call happens here. Idempotency: {{ idempotency or "none" }} (the move reads it from row_triggers.spec).
-- SECURITY DEFINER (it runs as jobkit's owner, whoever changes the row), search_path pinned empty:
-- every name below is qualified, except in `when`, the declared condition over new/old.
create or replace function {{ s }}.{{ fn | ident }}() returns trigger
language plpgsql volatile security definer set search_path = '' as {{ tag }}
#variable_conflict use_column
declare
    jobkit_rows bigint;
    jobkit_void text;
begin
    insert into {{ s }}.row_inbox (name, op, type, staged)
    select {{ name | literal }}, {{ op | literal }}, {{ type | literal }}, r.staged
    from (
{{ select() }}
    ) r;
    get diagnostics jobkit_rows = row_count;
    if found then  -- set by the insert; a bare variable is a cheaper expression than a comparison
        -- an assignment, not perform: an expression, not a query run through SPI (issue 24)
        jobkit_void := {{ s }}._wake_for({{ type | literal }}, jobkit_rows, null);
    end if;
    return null;
end
{{ tag }};
revoke all on function {{ s }}.{{ fn | ident }}() from public
{%- endif %}
