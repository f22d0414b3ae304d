-- The declared row triggers ([triggers.<name>] in jobkit.toml) as a plain script, for `jobkit render`
-- and `jobkit render --supabase` (toolkit/schema/trigger_script.py): what `jobkit deploy` does with
-- toolkit/schema/triggers.py, done by the database as the script runs, since a rendered file is
-- written without one. Per declared trigger and operation it reads the table's primary key and
-- columns from the catalog and fills them into the function sql/row_trigger.sql rendered (to the
-- text deploy renders: the same sha256 in row_triggers, so deploy --check agrees), and refuses, in
-- one line naming the trigger, what deploy refuses: a missing table or payload column, no primary
-- key, no TRIGGER privilege, a `when` that does not compile (tried on typed nulls), someone else's
-- trigger of the same name, a trigger to drop on a table the role does not own. Everything is
-- checked before anything is changed, and the file runs in one transaction. Then it creates,
-- replaces and drops the managed triggers as deploy does and records them; run again, it changes
-- nothing. The declarations are the argument of a temporary function, never part of its body.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
create function pg_temp.jobkit_row_triggers_apply(p_declared pg_catalog.jsonb) returns void
language plpgsql volatile set search_path = '' as $jobkit_row_triggers_apply$
declare
    d jsonb;
    plans jsonb := '[]';
    r record;
    v_rel oid;
    v_kind text;
    v_owner text;
    v_owned boolean;
    v_can boolean;
    v_pk text[];
    v_missing text;
    v_fn text;
    v_trial text;
    v_alias text;
    v_fill text;
    v_present boolean;
    v_enabled boolean;
    v_ours boolean;
    v_hash text;
    v_checksum text;
    v_definition text;
begin
    -- 1. Check everything and fill in the catalog's parts; change nothing.
    for d in select e.value from pg_catalog.jsonb_array_elements(p_declared) e loop
        v_rel := null;
        select c.oid, c.relkind::text, pg_catalog.pg_get_userbyid(c.relowner)::text,
               pg_catalog.pg_has_role(c.relowner, 'USAGE'),
               pg_catalog.has_schema_privilege(n.oid, 'USAGE') and pg_catalog.has_table_privilege(c.oid, 'TRIGGER')
        into v_rel, v_kind, v_owner, v_owned, v_can
        from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
        where n.nspname = (d->>'schema')::name and c.relname = (d->>'table')::name;
        if v_rel is null then
            raise exception '[triggers.%] table % does not exist', d->>'name', d->>'label'
                using hint = 'create the table in an earlier migration, or fix table (schema.table) and render again';
        elsif v_kind not in ('r', 'p') then
            raise exception '[triggers.%] % is not a table (relkind %)', d->>'name', d->>'label', v_kind
                using hint = 'row triggers go on tables: name the table the view reads';
        elsif d->>'schema' = {{ schema | literal }} then
            raise exception '[triggers.%] % is one of jobkit''s own tables', d->>'name', d->>'label'
                using hint = 'declare row triggers on your app''s tables';
        elsif not v_can then
            raise exception '[triggers.%] role % cannot create triggers on % (owned by %)',
                d->>'name', current_user, d->>'label', v_owner
                using hint = pg_catalog.format('as %s: GRANT USAGE ON SCHEMA %s TO %s; GRANT TRIGGER ON %s TO %s',
                                               v_owner, d->>'schema', current_user, d->>'label', current_user);
        end if;
        select pg_catalog.array_agg(a.attname::text order by k.ord) into v_pk
        from pg_catalog.pg_index i
        cross join lateral pg_catalog.unnest(i.indkey::int2[]) with ordinality as k(attnum, ord)
        join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = v_rel and i.indisprimary;
        if v_pk is null then
            raise exception '[triggers.%] % has no primary key', d->>'name', d->>'label'
                using hint = 'add one: a job records the primary key of the row it came from';
        end if;
        v_missing := null;
        select c.value into v_missing
        from pg_catalog.jsonb_array_elements_text(coalesce(d->'columns', '[]')) c
        where not exists (select 1 from pg_catalog.pg_attribute a
                          where a.attrelid = v_rel and a.attnum > 0 and not a.attisdropped
                            and a.attname = c.value::name)
        limit 1;
        if v_missing is not null then
            raise exception '[triggers.%] payload column % is not a column of %',
                d->>'name', pg_catalog.quote_literal(v_missing), d->>'label'
                using hint = 'fix payload in jobkit.toml and render again';
        end if;
        if d->>'key_column' is not null and not exists (
               select 1 from pg_catalog.pg_attribute a
               where a.attrelid = v_rel and a.attnum > 0 and not a.attisdropped
                 and a.attname = (d->>'key_column')::name) then
            raise exception '[triggers.%] key column % is not a column of %',
                d->>'name', pg_catalog.quote_literal(d->>'key_column'), d->>'label'
                using hint = 'fix key in jobkit.toml and render again';
        end if;
        -- sql/row_trigger.sql's macros object(), shaped() and the update join, on the catalog's names
        v_fn := d->>'function_sql';
        v_trial := d->>'trial_sql';
        foreach v_alias in array array['new', 'old'] loop
            v_fill := (select 'pg_catalog.jsonb_build_object('
                              || pg_catalog.string_agg(
                                     pg_catalog.concat('''', pg_catalog.replace(k.c, '''', ''''''), ''', ',
                                                       v_alias, '."', pg_catalog.replace(k.c, '"', '""'), '"'),
                                     ', ' order by k.ord) || ')'
                       from pg_catalog.unnest(v_pk) with ordinality as k(c, ord));
            v_fn := pg_catalog.replace(v_fn, '/*jobkit:pk_object:' || v_alias || '*/', v_fill);
            v_trial := pg_catalog.replace(v_trial, '/*jobkit:pk_object:' || v_alias || '*/', v_fill);
            -- a job trigger stages json (sql/row_trigger.sql): the same object, built as json
            v_fill := 'pg_catalog.json_build_object(' || pg_catalog.substr(v_fill, pg_catalog.length('pg_catalog.jsonb_build_object(') + 1);
            v_fn := pg_catalog.replace(v_fn, '/*jobkit:pk_json:' || v_alias || '*/', v_fill);
            v_trial := pg_catalog.replace(v_trial, '/*jobkit:pk_json:' || v_alias || '*/', v_fill);
            -- pk_key(): an emit trigger's event key, the primary key as text (several columns: a jsonb array)
            v_fill := (select case when pg_catalog.count(*) = 1
                                   then pg_catalog.min(pg_catalog.concat(v_alias, '."', pg_catalog.replace(k.c, '"', '""'), '"'))
                                        || '::pg_catalog.text'
                                   else 'pg_catalog.jsonb_build_array(' || pg_catalog.string_agg(
                                            pg_catalog.concat(v_alias, '."', pg_catalog.replace(k.c, '"', '""'), '"'),
                                            ', ' order by k.ord) || ')::pg_catalog.text' end
                       from pg_catalog.unnest(v_pk) with ordinality as k(c, ord));
            v_fn := pg_catalog.replace(v_fn, '/*jobkit:pk_key:' || v_alias || '*/', v_fill);
            v_trial := pg_catalog.replace(v_trial, '/*jobkit:pk_key:' || v_alias || '*/', v_fill);
            -- staged(): a job trigger's payload columns, then the primary key's not among them, as a json
            -- array (past json_build_array's 100 arguments: row_to_json of a ROW, keyed f1, f2, ...)
            v_fill := (select case when pg_catalog.count(*) <= 100 then 'pg_catalog.json_build_array('
                                   else 'pg_catalog.row_to_json(row(' end
                              || pg_catalog.string_agg(
                                     pg_catalog.concat(v_alias, '."', pg_catalog.replace(k.c, '"', '""'), '"'),
                                     ', ' order by k.ord)
                              || case when pg_catalog.count(*) <= 100 then ')' else '))' end
                       from (select c.value as c, c.ord
                             from pg_catalog.jsonb_array_elements_text(coalesce(d->'columns', '[]'))
                                  with ordinality as c(value, ord)
                             union all
                             select p.c, 1000 + p.ord from pg_catalog.unnest(v_pk) with ordinality as p(c, ord)
                             where not coalesce(d->'columns', '[]') ? p.c) k);
            v_fn := pg_catalog.replace(v_fn, '/*jobkit:staged:' || v_alias || '*/', v_fill);
            v_trial := pg_catalog.replace(v_trial, '/*jobkit:staged:' || v_alias || '*/', v_fill);
            v_fill := (select '(select ' || pg_catalog.string_agg(
                                  pg_catalog.concat('null::', pg_catalog.format_type(a.atttypid, a.atttypmod), ' as "',
                                                    pg_catalog.replace(a.attname::text, '"', '""'), '"'),
                                  ', ' order by a.attname::text collate "C") || ') as ' || v_alias
                       from pg_catalog.pg_attribute a
                       where a.attrelid = v_rel and a.attnum > 0 and not a.attisdropped);
            v_trial := pg_catalog.replace(v_trial, '/*jobkit:shaped:' || v_alias || '*/', v_fill);
        end loop;
        v_fill := (select pg_catalog.string_agg(
                              pg_catalog.concat('new."', pg_catalog.replace(k.c, '"', '""'),
                                                '" operator(pg_catalog.=) old."', pg_catalog.replace(k.c, '"', '""'), '"'),
                              ' and ' order by k.ord)
                   from pg_catalog.unnest(v_pk) with ordinality as k(c, ord));
        v_fn := pg_catalog.replace(v_fn, '/*jobkit:pk_join*/', v_fill);
        v_trial := pg_catalog.replace(v_trial, '/*jobkit:pk_join*/', v_fill);
        begin
            execute v_trial;
        exception when others then
            raise exception '[triggers.%] does not compile on % (%): %', d->>'name', d->>'label', d->>'op', sqlerrm
                using hint = 'fix when: one SQL condition over new.'
                             || case when d->>'op' = 'update' then '/old.' else '' end
                             || '<column>; qualify functions (e.g. pg_catalog.lower): the search_path is empty';
        end;
        v_ours := null;
        select coalesce(t.tgfoid = pg_catalog.to_regprocedure(
                   {{ s | literal }} || '."' || pg_catalog.replace(d->>'function', '"', '""') || '"()'), false)
        into v_ours
        from pg_catalog.pg_trigger t
        where t.tgrelid = v_rel and t.tgname = (d->>'trigger')::name;
        if not v_ours and not exists (select 1 from {{ s }}.row_triggers x
                                      where x.name = d->>'name' and x.op = d->>'op') then
            raise exception '[triggers.%] a trigger named % already exists on % and jobkit does not manage it',
                d->>'name', d->>'trigger', d->>'label'
                using hint = 'rename or drop that trigger; jobkit never touches triggers it did not make';
        end if;
        plans := plans || pg_catalog.jsonb_build_array(d || pg_catalog.jsonb_build_object(
            'pk', pg_catalog.to_jsonb(v_pk), 'rel', v_rel::bigint, 'owner', v_owner, 'owned', v_owned, 'function_sql', v_fn,
            'checksum', pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(v_fn || (d->>'trigger_sql'), 'UTF8')),
                                          'hex')));
    end loop;
    for r in select x.name, x.trigger_name, x.table_name, t.tgrelid as rel,
                    pg_catalog.pg_has_role(c.relowner, 'USAGE') as owned,
                    pg_catalog.pg_get_userbyid(c.relowner)::text as owner
             from {{ s }}.row_triggers x
             left join (pg_catalog.pg_trigger t
                        join pg_catalog.pg_class c on c.oid = t.tgrelid
                        join pg_catalog.pg_namespace n on n.oid = c.relnamespace)
                 on t.tgname = x.trigger_name::name
                and n.nspname::text = pg_catalog.split_part(x.table_name, '.', 1)
                and c.relname::text = pg_catalog.substr(x.table_name, pg_catalog.strpos(x.table_name, '.') + 1)
             where not exists (select 1 from pg_catalog.jsonb_array_elements(p_declared) e
                               where e.value->>'name' = x.name and e.value->>'op' = x.op) loop
        if r.rel is not null and not r.owned then
            raise exception '[triggers.%] was removed from jobkit.toml, but only % may drop trigger % on %',
                r.name, r.owner, r.trigger_name, r.table_name
                using hint = pg_catalog.format('as %s: DROP TRIGGER %s ON %s, then run this again (or keep the declaration)',
                                               r.owner, r.trigger_name, r.table_name);
        end if;
    end loop;
    -- 2. Apply, as toolkit/schema/triggers.py's _apply_one and _remove: replace the function when
    -- anything differs; re-create the trigger only when it is missing, disabled or altered.
    for d in select e.value from pg_catalog.jsonb_array_elements(plans) e loop
        v_rel := (d->>'rel')::bigint::oid;
        v_checksum := null;
        v_definition := null;
        select x.checksum, x.definition into v_checksum, v_definition from {{ s }}.row_triggers x
        where x.name = d->>'name' and x.op = d->>'op';
        v_present := null;
        select true, t.tgenabled <> 'D',
               coalesce(t.tgfoid = pg_catalog.to_regprocedure(
                   {{ s | literal }} || '."' || pg_catalog.replace(d->>'function', '"', '""') || '"()'), false),
               pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid) || t.tgenabled::text) || ':'
                   || pg_catalog.md5(pg_catalog.pg_get_functiondef(t.tgfoid))
        into v_present, v_enabled, v_ours, v_hash
        from pg_catalog.pg_trigger t
        where t.tgrelid = v_rel and t.tgname = (d->>'trigger')::name;
        v_present := coalesce(v_present, false);
        if v_present and v_enabled and v_hash = v_definition and v_checksum = d->>'checksum' then
            continue;
        end if;
        execute d->>'function_sql';
        if v_present and (not v_enabled or not v_ours
                          or pg_catalog.split_part(v_hash, ':', 1)
                             is distinct from pg_catalog.split_part(coalesce(v_definition, v_hash), ':', 1)) then
            if not (d->>'owned')::boolean then
                raise exception '[triggers.%] (% on %) was disabled or altered, and only % may replace it',
                    d->>'name', d->>'op', d->>'label', d->>'owner'
                    using hint = pg_catalog.format('as %s: DROP TRIGGER %s ON %s, then run this again',
                                                   d->>'owner', d->>'trigger', d->>'label');
            end if;
            execute pg_catalog.format('drop trigger %I on %I.%I', d->>'trigger', d->>'schema', d->>'table');
            v_present := false;
        end if;
        if not v_present then
            execute d->>'trigger_sql';
        end if;
        select pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid) || t.tgenabled::text) || ':'
                   || pg_catalog.md5(pg_catalog.pg_get_functiondef(t.tgfoid))
        into v_hash
        from pg_catalog.pg_trigger t
        where t.tgrelid = v_rel and t.tgname = (d->>'trigger')::name;
        insert into {{ s }}.row_triggers as x (name, op, table_name, trigger_name, function_name, spec, checksum,
                                              definition, deployed_at)
        values (d->>'name', d->>'op', d->>'label', d->>'trigger', d->>'function',
                (d->'spec') || pg_catalog.jsonb_build_object('pk', d->'pk'), d->>'checksum',
                v_hash, pg_catalog.now())
        on conflict (name, op) do update
        set table_name = excluded.table_name, trigger_name = excluded.trigger_name,
            function_name = excluded.function_name, spec = excluded.spec, checksum = excluded.checksum,
            definition = excluded.definition, deployed_at = excluded.deployed_at;
    end loop;
    for r in select x.name, x.op, x.trigger_name, x.function_name, t.tgrelid as rel
             from {{ s }}.row_triggers x
             left join (pg_catalog.pg_trigger t
                        join pg_catalog.pg_class c on c.oid = t.tgrelid
                        join pg_catalog.pg_namespace n on n.oid = c.relnamespace)
                 on t.tgname = x.trigger_name::name
                and n.nspname::text = pg_catalog.split_part(x.table_name, '.', 1)
                and c.relname::text = pg_catalog.substr(x.table_name, pg_catalog.strpos(x.table_name, '.') + 1)
             where not exists (select 1 from pg_catalog.jsonb_array_elements(p_declared) e
                               where e.value->>'name' = x.name and e.value->>'op' = x.op) loop
        if r.rel is not null then
            execute pg_catalog.format('drop trigger %I on %s', r.trigger_name, r.rel::pg_catalog.regclass);
        end if;
        perform {{ s }}.move_row_inbox(null, null, r.name);  -- its staged rows, while row_triggers has its spec
        execute pg_catalog.format('drop function if exists %s.%I()', {{ s | literal }}, r.function_name);
        delete from {{ s }}.row_triggers x where x.name = r.name and x.op = r.op;
    end loop;
end
$jobkit_row_triggers_apply$;
select pg_temp.jobkit_row_triggers_apply({{ declared | literal }}::pg_catalog.jsonb);
drop function pg_temp.jobkit_row_triggers_apply(pg_catalog.jsonb);
