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
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.
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
