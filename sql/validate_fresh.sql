-- A fresh install (`jobkit render`, a Supabase project's first jobkit migration file): the
-- migrations added their constraints NOT VALID, as a live queue needs; on these empty tables
-- validating them is free, so the script ends with every constraint valid, as `jobkit deploy`
-- leaves it. (An upgrade file leaves them to `jobkit deploy`, which validates each in a
-- transaction of its own.)
do $$
declare
    c record;
begin
    for c in
        select r.relname as tbl, k.conname as con
        from pg_catalog.pg_constraint k
        join pg_catalog.pg_class r on r.oid operator(pg_catalog.=) k.conrelid
        join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) r.relnamespace
        where n.nspname operator(pg_catalog.=) {{ schema | literal }} and not k.convalidated
    loop
        execute pg_catalog.format('alter table %I.%I validate constraint %I', {{ schema | literal }}, c.tbl, c.con);
    end loop;
end
$$;
