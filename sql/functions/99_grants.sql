-- Grants
-- sql/functions/99_grants.sql: nothing for PUBLIC, anon or authenticated; what jobkit's API needs for service_role. Last, so that it covers every function above.
-- Applied in file-name order (after 90_views.sql, the last); sql/functions/README.md says how deploy applies these files.

revoke all on all tables in schema {{ s }} from public;
revoke all on all sequences in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
-- Grants, re-run at the end of every migration: anon and authenticated get nothing, service_role gets
-- what jobkit's API needs. On PostgreSQL without the Supabase roles, each skipped role is reported as a
-- NOTICE that `jobkit deploy` prints.
do $grants$
declare
    v_schema constant text := {{ schema | literal }};
    v_role text;
begin
    foreach v_role in array array['anon', 'authenticated'] loop
        if exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
            execute pg_catalog.format('revoke all on schema %I from %I', v_schema, v_role);
            execute pg_catalog.format('revoke all on all tables in schema %I from %I', v_schema, v_role);
            execute pg_catalog.format('revoke all on all sequences in schema %I from %I', v_schema, v_role);
            execute pg_catalog.format('revoke all on all functions in schema %I from %I', v_schema, v_role);
        else
            raise notice 'jobkit: role % does not exist; skipped revoking its privileges', v_role;
        end if;
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'service_role') then
        execute pg_catalog.format('grant usage on schema %I to service_role', v_schema);
        execute pg_catalog.format('grant select, insert, update, delete on all tables in schema %I to service_role', v_schema);
        execute pg_catalog.format('grant usage, select on all sequences in schema %I to service_role', v_schema);
        execute pg_catalog.format('grant execute on all functions in schema %I to service_role', v_schema);
    else
        raise notice 'jobkit: role service_role does not exist; skipped granting it access';
    end if;
end
$grants$;
