{#- A declared row trigger ([triggers.<name>] in jobkit.toml) for one operation, rendered by
    toolkit/schema/triggers.py in three parts: "trial" (only the select, over typed nulls shaped
    like the table, for deploy's rolled-back check of `when` and the payload: no privilege on the
    table needed), "function" (the trigger function) and "trigger" (the CREATE TRIGGER).
    With pk = none (`jobkit render`: no database to read it from) the parts that depend on the
    table's primary key or columns are left as /*jobkit:...*/ tokens, which
    sql/row_triggers_apply.sql fills in from the catalog when it runs, to the same text. -#}
{%- set alias = "old" if op == "delete" else "new" -%}
{%- set trial = part == "trial" -%}
{%- macro object(rel, cols) -%}
pg_catalog.jsonb_build_object({% for c in cols %}{{ c | literal }}, {{ rel }}.{{ c | ident }}{% if not loop.last %}, {% endif %}{% endfor %})
{%- endmacro -%}
{%- macro pk_object(rel) -%}
{%- if pk is none %}/*jobkit:pk_object:{{ rel }}*/{% else %}{{ object(rel, pk) }}{% endif -%}
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
{% if payload == "row" %}pg_catalog.to_jsonb({{ alias }}.*){% elif payload == "pk" %}{{ pk_object(alias) }}{% else %}{{ object(alias, payload) }}{% endif %}
{%- endmacro -%}
{%- macro select() -%}
{%- if emit %}
        select {% if key %}{{ alias }}.{{ key | ident }}::pg_catalog.text{% else %}{{ pk_key(alias) }}{% endif %} as key,
               {{ payload_value() }} as payload
{%- else %}
        select {{ type | literal }}::pg_catalog.text as type,
               {{ payload_value() }} as payload,
               {{ pk_object(alias) }} as pk,
               {% if idempotency == "pk" %}{{ name | literal }} operator(pg_catalog.||) ':' operator(pg_catalog.||) {{ pk_object(alias) }}::pg_catalog.text{% else %}null::pg_catalog.text{% endif %} as idempotency_key
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
-- table(s) feed one insert into jobkit's jobs table per statement, in the statement's transaction. That
-- insert is the engine's bulk path: jobs_wake_on_insert (sql/functions/70_wake.sql) fires once for it
-- and coalesces the wake-ups as for any enqueue. No HTTP call happens here. The constant part of
-- jobs.source is one jsonb literal (parsed once per plan): building it per row cost about 10% of
-- a job row (docs/BENCHMARKS.md, issue 24).
-- SECURITY DEFINER (it runs as jobkit's owner, whoever changes the row), search_path pinned empty:
-- every name below is qualified, except in `when`, the declared condition over new/old.
create or replace function {{ s }}.{{ fn | ident }}() returns trigger
language plpgsql volatile security definer set search_path = '' as {{ tag }}
#variable_conflict use_column
begin
    insert into {{ s }}.jobs (type, payload, idempotency_key, concurrency_key, source)
    select r.type, r.payload, r.idempotency_key,
           coalesce(case when t.key_template is not null then {{ s }}._render_key(t.key_template, r.payload) end,
                    case when t.fair then '' end),
           {{ source_constant | literal }}::pg_catalog.jsonb operator(pg_catalog.||) pg_catalog.jsonb_build_object('pk', r.pk)
    from (
{{ select() }}
    ) r
    left join {{ s }}.job_types t on t.type operator(pg_catalog.=) r.type
{%- if idempotency == "pk" %}
    on conflict (type, idempotency_key)
        where idempotency_key is not null and status in ('pending', 'processing')
        do nothing
{%- endif %};
    return null;
end
{{ tag }};
revoke all on function {{ s }}.{{ fn | ident }}() from public
{%- endif %}
