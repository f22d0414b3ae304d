-- Declared row triggers ([triggers.<name>] in jobkit.toml, issue 24): deploy's checks of the table,
-- the managed triggers' state, `jobkit triggers list` and doctor.

-- name: trigger_table
-- The table a trigger is declared on, as the deploying role sees it: its kind, owner, whether this
-- role may create triggers on it (TRIGGER, or membership in the owner), owns it (needed to drop,
-- disable or replace a trigger), its columns with their types, and its primary key in order.
select c.oid::pg_catalog.regclass::pg_catalog.text as regclass, c.relkind::pg_catalog.text as relkind,
       current_user::pg_catalog.text as role,
       pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text as owner,
       pg_catalog.pg_has_role(c.relowner, 'USAGE') as owned,
       pg_catalog.has_schema_privilege(n.oid, 'USAGE')
           and pg_catalog.has_table_privilege(c.oid, 'TRIGGER') as can_trigger,
       (select pg_catalog.jsonb_object_agg(a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod))
        from pg_catalog.pg_attribute a
        where a.attrelid operator(pg_catalog.=) c.oid and a.attnum operator(pg_catalog.>) 0
          and not a.attisdropped) as columns,
       (select pg_catalog.array_agg(a.attname::pg_catalog.text order by k.ord)
        from pg_catalog.pg_index i
        cross join lateral pg_catalog.unnest(i.indkey::pg_catalog.int2[]) with ordinality as k(attnum, ord)
        join pg_catalog.pg_attribute a on a.attrelid operator(pg_catalog.=) i.indrelid
                                      and a.attnum operator(pg_catalog.=) k.attnum
        where i.indrelid operator(pg_catalog.=) c.oid and i.indisprimary) as pk
from pg_catalog.pg_class c
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s::pg_catalog.name
  and c.relname operator(pg_catalog.=) %(table)s::pg_catalog.name

-- name: row_triggers_deployed
-- The row triggers deploy manages (none before migration 0015), with each one's state in the
-- catalog: present, enabled, and its definition now: md5(trigger and its enabled flag):md5(function).
select r.name, r.op, r.table_name, r.trigger_name, r.function_name, r.spec, r.checksum, r.definition,
       pg_catalog.split_part(r.table_name, '.', 1) as table_schema,
       pg_catalog.substr(r.table_name, pg_catalog.strpos(r.table_name, '.') operator(pg_catalog.+) 1)
           as table_only,
       s.present, s.enabled, s.hash
from {{ s }}.row_triggers r
left join lateral (
    select true as present, t.tgenabled operator(pg_catalog.<>) 'D' as enabled,
           pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid) operator(pg_catalog.||)
                          t.tgenabled::pg_catalog.text) operator(pg_catalog.||) ':'
               operator(pg_catalog.||) pg_catalog.md5(pg_catalog.pg_get_functiondef(t.tgfoid)) as hash
    from pg_catalog.pg_trigger t
    join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) t.tgrelid
    join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
    where n.nspname::pg_catalog.text operator(pg_catalog.=) pg_catalog.split_part(r.table_name, '.', 1)
      and c.relname::pg_catalog.text operator(pg_catalog.=)
          pg_catalog.substr(r.table_name, pg_catalog.strpos(r.table_name, '.') operator(pg_catalog.+) 1)
      and t.tgname::pg_catalog.text operator(pg_catalog.=) r.trigger_name
) s on true
order by r.name, r.op

-- name: row_triggers_table
-- Whether the registry of managed row triggers exists yet (migration 0015).
select pg_catalog.to_regclass({{ (s ~ ".row_triggers") | literal }}) is not null

-- name: row_trigger_state
-- One trigger on one table: present, enabled, its definition (as in row_triggers_deployed), and whether it runs
-- jobkit's function of that name (else it is someone else's trigger).
select t.tgenabled operator(pg_catalog.<>) 'D' as enabled,
       pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid) operator(pg_catalog.||)
                      t.tgenabled::pg_catalog.text) operator(pg_catalog.||) ':'
           operator(pg_catalog.||) pg_catalog.md5(pg_catalog.pg_get_functiondef(t.tgfoid)) as hash,
       t.tgfoid operator(pg_catalog.=) pg_catalog.to_regprocedure(%(function)s) as ours
from pg_catalog.pg_trigger t
join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) t.tgrelid
join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s::pg_catalog.name
  and c.relname operator(pg_catalog.=) %(table)s::pg_catalog.name
  and t.tgname operator(pg_catalog.=) %(trigger)s::pg_catalog.name

-- name: row_trigger_record
-- After deploy made (or kept) a managed trigger: what it was made from and what it looks like.
insert into {{ s }}.row_triggers as r (name, op, table_name, trigger_name, function_name, spec, checksum,
                                      definition, deployed_at)
values (%(name)s, %(op)s, %(table)s, %(trigger)s, %(function)s, %(spec)s, %(checksum)s, %(definition)s,
        pg_catalog.now())
on conflict (name, op) do update
set table_name = excluded.table_name, trigger_name = excluded.trigger_name,
    function_name = excluded.function_name, spec = excluded.spec, checksum = excluded.checksum,
    definition = excluded.definition, deployed_at = excluded.deployed_at

-- name: row_trigger_move
-- A trigger about to be removed: its staged rows become jobs while row_triggers still has its spec.
select {{ s }}.move_row_inbox(null, null, %(name)s)

-- name: row_trigger_forget
delete from {{ s }}.row_triggers r
where r.name operator(pg_catalog.=) %(name)s and r.op operator(pg_catalog.=) %(op)s

-- name: row_trigger_jobs
-- Jobs each trigger made in the last hour (jobs.source, 0015), by trigger name, counting the rows it
-- staged that are not jobs yet (row_inbox, 0026: a moved row's job keeps its staged_at as created_at).
select x.name, pg_catalog.count(*) as jobs
from (select j.source operator(pg_catalog.->>) 'trigger' as name
      from {{ s }}.jobs j
      where j.created_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
        and j.source is not null
      union all
      select i.name
      from {{ s }}.row_inbox i
      where i.staged_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')) x
group by 1

-- name: row_trigger_events
-- Events of these names (the emit triggers' events) emitted in the last hour, by name.
select e.name, pg_catalog.count(*) as events
from {{ s }}.events e
where e.name operator(pg_catalog.=) any (%(names)s::pg_catalog.text[])
  and e.emitted_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
group by 1
