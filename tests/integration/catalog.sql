-- One line per object of a schema (tables, columns, constraints, indexes, functions with their
-- bodies, views, triggers, policies, grants, comments), normalised: two schemas are the same when
-- their lines are. Used by test_schema_drift.py.
with ns as (select oid from pg_namespace where nspname = %(schema)s)
select line from (
  select 'table ' || c.relname || ' kind=' || c.relkind::text || ' rls=' || c.relrowsecurity
         || ' force=' || c.relforcerowsecurity || ' persistence=' || c.relpersistence::text
         || ' options=' || coalesce(array_to_string(c.reloptions, ','), '') || ' acl=' || coalesce(c.relacl::text, '')
         || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '') as line
  from pg_class c where c.relnamespace = (select oid from ns) and c.relkind in ('r', 'v', 'm', 'S', 'p', 'f')
  union all
  -- a column's place among the live ones (a dropped column leaves a gap in attnum: 0011 replaced one)
  select 'column ' || c.relname || '.' || a.attname || ' #'
         || (select count(*) from pg_attribute b where b.attrelid = a.attrelid and b.attnum > 0
               and not b.attisdropped and b.attnum <= a.attnum)
         || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' notnull=' || a.attnotnull || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
         || ' comment=' || coalesce(col_description(c.oid, a.attnum), '')
  from pg_attribute a join pg_class c on c.oid = a.attrelid
  left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
  where c.relnamespace = (select oid from ns) and a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'v', 'p')
  union all
  select 'constraint ' || c.relname || '.' || con.conname || ' ' || pg_get_constraintdef(con.oid)
  from pg_constraint con join pg_class c on c.oid = con.conrelid where c.relnamespace = (select oid from ns)
  union all
  select 'index ' || pg_get_indexdef(i.indexrelid)
  from pg_index i join pg_class c on c.oid = i.indrelid where c.relnamespace = (select oid from ns)
  union all
  select 'function ' || p.oid::regprocedure::text || ' acl=' || coalesce(p.proacl::text, '')
         || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '') || E'\n' || pg_get_functiondef(p.oid)
  from pg_proc p where p.pronamespace = (select oid from ns)
  union all
  select 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid)
  from pg_class c where c.relnamespace = (select oid from ns) and c.relkind = 'v'
  union all
  select 'trigger ' || pg_get_triggerdef(t.oid)
  from pg_trigger t join pg_class c on c.oid = t.tgrelid where c.relnamespace = (select oid from ns) and not t.tgisinternal
  union all
  select 'policy ' || pol.polname || ' on ' || c.relname || ' ' || coalesce(pg_get_expr(pol.polqual, pol.polrelid), '')
  from pg_policy pol join pg_class c on c.oid = pol.polrelid where c.relnamespace = (select oid from ns)
  union all
  select 'type ' || t.typname || ' ' || t.typtype::text
  from pg_type t where t.typnamespace = (select oid from ns) and t.typtype in ('c', 'd', 'e') and t.typrelid = 0
  union all
  select 'schema acl=' || coalesce(n.nspacl::text, '') from pg_namespace n where n.oid = (select oid from ns)
) lines order by line
