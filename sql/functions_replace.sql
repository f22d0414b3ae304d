-- sql/functions/ as one Supabase CLI migration (`jobkit render --supabase`). `jobkit deploy` applies
-- those files statement by statement; a migration file is a plain script, so this one replaces what
-- a database already has wholesale: the EXECUTE grants other roles hold are kept, every function
-- of jobkit's schema (not of an extension, nor a declared row trigger's rowtrigger_*, which the
-- triggers file manages) is dropped with what depends on it (jobkit's triggers), and everything is
-- created again, then the grants are given back.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
{{ keep_grants }};
do $replace$
declare
    r record;
begin
    for r in select p.oid::pg_catalog.regprocedure as f from pg_catalog.pg_proc p
             where p.pronamespace operator(pg_catalog.=) {{ schema | literal }}::pg_catalog.regnamespace
               -- the declared row triggers' functions are not the files' (their triggers would go too)
               and not (p.proname::pg_catalog.text operator(pg_catalog.~~) 'rowtrigger\_%')
               and not exists (select 1 from pg_catalog.pg_depend d
                               where d.classid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                                 and d.objid operator(pg_catalog.=) p.oid
                                 and d.deptype operator(pg_catalog.=) 'e') loop
        execute pg_catalog.format('drop function if exists %s cascade', r.f);
    end loop;
end
$replace$;
drop view if exists {{ s }}.job_history;

{{ functions }}
{{ restore_grants }};
