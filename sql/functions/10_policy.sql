-- The public API: per-type policy
-- sql/functions/10_policy.sql: type settings, attempt limits, backoff, and the concurrency key templates of fair types.
-- Applied in file-name order (first, before 20_enqueue.sql); sql/functions/README.md says how deploy applies these files.

-- The settings of one type: its own row, else the defaults row.
create or replace function {{ s }}.type_settings(p_type text) returns {{ s }}.job_types
language plpgsql stable set search_path = '' as $$
declare
    v_row {{ s }}.job_types;
begin
    -- plpgsql, not sql: its plan is cached per session (a sql function is planned on every call).
    select t.* into v_row from {{ s }}.job_types t
    where t.type in (p_type, '*')
    order by t.type = '*'
    limit 1;
    return v_row;
end
$$;

-- 0012: a worker records the types it serves when it starts (one statement per start).
create or replace function {{ s }}.record_types(p_types text[]) returns void
language sql volatile set search_path = '' as $$
    insert into {{ s }}.known_types as k (type)
    select distinct t.type from pg_catalog.unnest(p_types) as t(type) where t.type is not null
    order by 1
    on conflict (type) do update set seen_at = pg_catalog.now()
$$;

-- The attempt limit of a job (see the header): its own, its last handler's, its type's (p_type_max).
create or replace function {{ s }}.attempt_limit(p_job_max int, p_handler_max int, p_type_max int) returns int
language sql immutable set search_path = '' as $$
    select coalesce(p_job_max, p_handler_max, p_type_max, 3)
$$;

-- Retry delay for an attempt that just failed: base * factor^(attempt-1), capped, ± jitter, >= 1 s.
create or replace function {{ s }}.backoff(p_type text, p_attempt int) returns interval
language sql volatile set search_path = '' as $$
    select make_interval(secs => greatest(1.0,
        least(extract(epoch from c.backoff_cap)::float8,
              extract(epoch from c.backoff_base)::float8
                * power(c.backoff_factor, least(greatest(p_attempt, 1) - 1, 100)))
        * (1 + c.backoff_jitter * (2 * random() - 1))))
    from {{ s }}.type_settings(p_type) c
$$;

-- A key rendered from a type's template: strings are copied, arrays are paths into the payload
-- (a missing field renders as the empty string), {"ref": "owner"} is the job's owner (0011; the
-- two-argument form, for jobs without one, renders it as '').
create or replace function {{ s }}._render_key(p_template jsonb, p_payload jsonb) returns text
language sql immutable set search_path = '' as $$
    select pg_catalog.string_agg(
               case pg_catalog.jsonb_typeof(e.part)
                   when 'string' then e.part #>> '{}'
                   when 'array' then coalesce(p_payload #>> array(select pg_catalog.jsonb_array_elements_text(e.part)), '')
                   else ''
               end, '' order by e.n)
    from pg_catalog.jsonb_array_elements(p_template) with ordinality as e(part, n)
$$;

create or replace function {{ s }}._render_key(p_template jsonb, p_payload jsonb, p_owner text) returns text
language sql immutable set search_path = '' as $$
    select pg_catalog.string_agg(
               case pg_catalog.jsonb_typeof(e.part)
                   when 'string' then e.part #>> '{}'
                   when 'array' then coalesce(p_payload #>> array(select pg_catalog.jsonb_array_elements_text(e.part)), '')
                   else coalesce(p_owner, '')
               end, '' order by e.n)
    from pg_catalog.jsonb_array_elements(p_template) with ordinality as e(part, n)
$$;

-- A new job's concurrency key: the given one, else the type's template, else '' for a fair type.
create or replace function {{ s }}._job_key(p_type text, p_payload jsonb, p_key text) returns text
language plpgsql stable set search_path = '' as $$
declare
    v_fair boolean;
    v_template jsonb;
begin
    if p_key is not null then
        return p_key;
    end if;
    select t.fair, t.key_template into v_fair, v_template from {{ s }}.job_types t where t.type = p_type;
    if v_template is not null then
        return {{ s }}._render_key(v_template, p_payload);
    end if;
    return case when v_fair then '' end;
end
$$;

-- A type that becomes fair gives its unfinished jobs their keys (fair claims see only keyed jobs),
-- owned jobs with their owner.
create or replace function {{ s }}.job_types_key_backfill() returns trigger
language plpgsql set search_path = '' as $$
begin
    if new.fair and (tg_op = 'INSERT' or not old.fair) then
        update {{ s }}.jobs j
        set concurrency_key = coalesce({{ s }}._render_key(new.key_template, j.payload, j.owner), ''),
            updated_at = now()
        where j.type = new.type and j.status in ('pending', 'processing') and j.concurrency_key is null;
    end if;
    return null;
end
$$;

create or replace trigger job_types_key_backfill after insert or update of fair on {{ s }}.job_types
    for each row execute function {{ s }}.job_types_key_backfill();
