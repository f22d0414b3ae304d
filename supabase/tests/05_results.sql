-- Results for producers (0006): jobs.progress written by set_progress (fenced like a heartbeat),
-- the state a waiting producer reads, and who may call the new functions. Notifications on
-- jobkit_done are sent at commit, so a rolled-back test cannot see them; tests/integration/test_wait.py
-- checks them. Everything is rolled back.
begin;
set local client_min_messages = warning;
-- pgTAP lives in schema extensions (the Supabase CLI creates it there); create both when missing.
do $$
begin
    if to_regnamespace('extensions') is null then
        create schema extensions;
    end if;
end
$$;
create extension if not exists pgtap with schema extensions;
set local search_path = extensions, public;

-- pgTAP runs as service_role below: it needs USAGE on pgTAP's schema (Supabase grants it).
do $$
begin
    if not has_schema_privilege('service_role', 'extensions', 'usage') then
        grant usage on schema extensions to service_role;
    end if;
end
$$;

select plan(14);

select has_column('jobkit', 'jobs', 'progress', 'jobs.progress exists');
select col_type_is('jobkit', 'jobs', 'progress', 'jsonb', 'jobs.progress is jsonb');
select col_is_null('jobkit', 'jobs', 'progress', 'jobs.progress is nullable');
select has_function('jobkit', 'set_progress', array['uuid[]', 'integer[]', 'jsonb'], 'set_progress exists');
select function_returns('jobkit', 'set_progress', array['uuid[]', 'integer[]', 'jsonb'], 'setof uuid',
    'set_progress returns the ids it updated');
select results_eq(
    $$select r.rolname::text collate "default", has_function_privilege(r.rolname, p.oid, 'EXECUTE')
      from pg_catalog.pg_proc p cross join pg_catalog.pg_roles r
      where p.oid = 'jobkit.set_progress(uuid[], integer[], jsonb)'::regprocedure
        and r.rolname in ('anon', 'authenticated', 'service_role')
      order by 1$$,
    $$values ('anon', false), ('authenticated', false), ('service_role', true)$$,
    'set_progress: executable by service_role only'
);
select results_eq(
    $$select r.rolname::text collate "default", has_function_privilege(r.rolname, p.oid, 'EXECUTE')
      from pg_catalog.pg_proc p cross join pg_catalog.pg_roles r
      where p.oid = 'jobkit._notify_done(uuid[])'::regprocedure
        and r.rolname in ('anon', 'authenticated')
      order by 1$$,
    $$values ('anon', false), ('authenticated', false)$$,
    '_notify_done: not for anon or authenticated'
);

set local role service_role;

select lives_ok($$select jobkit.enqueue('pgtap_progress', '{}')$$, 'enqueue a job');
select lives_ok($$select jobkit.claim_jobs('pgtap_progress', 1, 'pgtap-w', '1 minute')$$, 'claim it');
select is(
    (select count(*) from jobkit.set_progress(
        array(select id from jobkit.jobs where type = 'pgtap_progress'), array[1],
        '[{"fraction": 0.5, "done": 1, "total": 2, "message": "half"}]')),
    1::bigint, 'set_progress stores the progress of the running attempt'
);
select is(
    (select progress from jobkit.jobs where type = 'pgtap_progress'),
    '{"fraction": 0.5, "done": 1, "total": 2, "message": "half"}'::jsonb, 'as given'
);
select is(
    (select count(*) from jobkit.set_progress(
        array(select id from jobkit.jobs where type = 'pgtap_progress'), array[2], '[{"fraction": 1}]')),
    0::bigint, 'another attempt''s progress is refused (fenced)'
);
select throws_ok(
    $$select jobkit.set_progress(array(select id from jobkit.jobs where type = 'pgtap_progress'),
                                 array[1], '{"fraction": 1}')$$,
    '22023', null, 'progress must be a JSON array as long as the ids'
);
select is(
    (select count(*) from jobkit.complete_jobs(
        array(select id from jobkit.jobs where type = 'pgtap_progress'), array[1], null)),
    1::bigint, 'complete_jobs still completes it (and notifies jobkit_done at commit)'
);

reset role;

select * from finish();
rollback;
