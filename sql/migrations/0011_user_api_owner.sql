-- jobkit 0011: a job's owner is any JWT subject (text), and concurrency-key templates can name the owner.
--
-- Supabase's third-party auth (Clerk, Auth0, Firebase, Cognito) signs users in with subjects that are
-- not UUIDs ("user_2abc", "auth0|5f7c..."), so jobs.owner (uuid since 0007) becomes text. Changing
-- the column's type would rewrite every job under an ACCESS EXCLUSIVE lock, so the uuid column is
-- dropped and a text one added instead: both are catalog changes, whatever the size of the table.
-- No job row is written here. The owners of existing owned jobs are in the per-user API's own table
-- (<user_api schema>.jobs), and sql/user_api.sql, which deploy re-applies right after the
-- migrations, copies them back and brings that table up to date (see "after 0011" there).
--
-- The per-user API's triggers on jobs name the old column; they are dropped here and re-created by
-- sql/user_api.sql. Until then its enqueue and cancel are closed (revoked), so that no job is
-- enqueued or cancelled by a user while its changes are not being mirrored. A deployment whose
-- jobkit.toml no longer has [user_api] keeps them closed.
do $user_api$
declare
    v_schema text;
begin
    -- (operators named with their schema: this runs under the deployer's search_path)
    select n.nspname into v_schema
    from pg_catalog.pg_trigger t
    join pg_catalog.pg_class c on c.oid OPERATOR(pg_catalog.=) t.tgrelid
    join pg_catalog.pg_namespace cn on cn.oid OPERATOR(pg_catalog.=) c.relnamespace
    join pg_catalog.pg_proc p on p.oid OPERATOR(pg_catalog.=) t.tgfoid
    join pg_catalog.pg_namespace n on n.oid OPERATOR(pg_catalog.=) p.pronamespace
    where cn.nspname OPERATOR(pg_catalog.=) {{ schema | literal }}::pg_catalog.name and c.relname OPERATOR(pg_catalog.=) 'jobs'::pg_catalog.name
      and t.tgname OPERATOR(pg_catalog.=) 'jobs_user_sync'::pg_catalog.name;
    if v_schema is null then
        return;
    end if;
    -- (reads stay open: the users' table and caller(), which its policy calls, are untouched)
    if exists (select 1 from pg_catalog.pg_roles where rolname OPERATOR(pg_catalog.=) 'authenticated'::pg_catalog.name)
       and pg_catalog.to_regprocedure(pg_catalog.format('%I.enqueue(text, jsonb)', v_schema)) is not null
       and pg_catalog.to_regprocedure(pg_catalog.format('%I.cancel(uuid)', v_schema)) is not null then
        execute pg_catalog.format('revoke all on function %I.enqueue(text, jsonb), %I.cancel(uuid) from authenticated',
                                  v_schema, v_schema);
    end if;
end
$user_api$;
drop trigger if exists jobs_user_sync on {{ s }}.jobs;
drop trigger if exists jobs_user_forget on {{ s }}.jobs;

alter table {{ s }}.jobs drop column owner;  -- and its index jobs_owner_idx (the per-user API reads by id)
alter table {{ s }}.jobs add column owner text;

-- A key rendered from a type's template for a job of p_owner: {"ref": "owner"} parts are the owner
-- ('' without one). The two-argument form renders them as ''.
create function {{ s }}._render_key(p_template jsonb, p_payload jsonb, p_owner text) returns text
language sql immutable set search_path = '' as $$
    select pg_catalog.string_agg(
               case pg_catalog.jsonb_typeof(e.part)
                   when 'string' then e.part #>> '{}'
                   when 'array' then coalesce(p_payload #>> array(select pg_catalog.jsonb_array_elements_text(e.part)), '')
                   else coalesce(p_owner, '')
               end, '' order by e.n)
    from pg_catalog.jsonb_array_elements(p_template) with ordinality as e(part, n)
$$;

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

-- A type that becomes fair gives its unfinished jobs their keys, owned jobs with their owner.
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

revoke all on function {{ s }}._render_key(jsonb, jsonb, text) from public;
{% include "grants.sql" %}
