-- Security: RLS on every jobkit table, no privilege at all for anon and authenticated (nor PUBLIC),
-- what service_role needs, pinned search_path, and what each role gets when it tries.
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

-- pgTAP runs as the roles below (set local role), so they need USAGE on its schema. Supabase grants
-- it on `extensions`; on a plain database whose `extensions` this file just created, grant it here
-- (rolled back at the end).
do $$
declare
    v_role text;
begin
    foreach v_role in array array['anon', 'authenticated', 'service_role'] loop
        if not has_schema_privilege(v_role, 'extensions', 'usage') then
            execute format('grant usage on schema extensions to %I', v_role);
        end if;
    end loop;
end
$$;

select plan(48);

-- RLS is enabled on every table jobkit has (the named ones and any a later migration adds).
select results_eq(
    $$select c.relname::text collate "default", c.relrowsecurity
      from pg_catalog.pg_class c
      where c.relnamespace = 'jobkit'::regnamespace
        and c.relname in ('jobs', 'job_attempts', 'job_types', 'settings', 'secrets', 'wakeups',
                          'rate_limits', 'schedules', 'schema_migrations')
      order by 1$$,
    $$values ('job_attempts', true), ('job_types', true), ('jobs', true), ('rate_limits', true),
             ('schedules', true), ('schema_migrations', true), ('secrets', true),
             ('settings', true), ('wakeups', true)$$,
    'RLS is enabled on each of the nine jobkit tables'
);
select is_empty(
    $$select c.relname from pg_catalog.pg_class c
      where c.relnamespace = 'jobkit'::regnamespace and c.relkind in ('r', 'p')
        and not c.relrowsecurity$$,
    'no jobkit table is without RLS'
);

-- The schema: nothing for anon and authenticated, USAGE for service_role.
select schema_privs_are('jobkit', 'anon', array[]::text[], 'anon has no privilege on schema jobkit');
select schema_privs_are('jobkit', 'authenticated', array[]::text[],
    'authenticated has no privilege on schema jobkit');
select schema_privs_are('jobkit', 'service_role', array['USAGE'], 'service_role may use schema jobkit');

-- Tables: no privilege for anon and authenticated on any of them.
select table_privs_are('jobkit', 'jobs', 'anon', array[]::text[], 'anon: no privilege on jobs');
select table_privs_are('jobkit', 'job_attempts', 'anon', array[]::text[], 'anon: no privilege on job_attempts');
select table_privs_are('jobkit', 'job_types', 'anon', array[]::text[], 'anon: no privilege on job_types');
select table_privs_are('jobkit', 'settings', 'anon', array[]::text[], 'anon: no privilege on settings');
select table_privs_are('jobkit', 'secrets', 'anon', array[]::text[], 'anon: no privilege on secrets');
select table_privs_are('jobkit', 'wakeups', 'anon', array[]::text[], 'anon: no privilege on wakeups');
select table_privs_are('jobkit', 'rate_limits', 'anon', array[]::text[], 'anon: no privilege on rate_limits');
select table_privs_are('jobkit', 'schedules', 'anon', array[]::text[], 'anon: no privilege on schedules');
select table_privs_are('jobkit', 'schema_migrations', 'anon', array[]::text[],
    'anon: no privilege on schema_migrations');
select table_privs_are('jobkit', 'jobs', 'authenticated', array[]::text[], 'authenticated: no privilege on jobs');
select table_privs_are('jobkit', 'job_attempts', 'authenticated', array[]::text[],
    'authenticated: no privilege on job_attempts');
select table_privs_are('jobkit', 'job_history', 'anon', array[]::text[], 'anon: no privilege on job_history');
select table_privs_are('jobkit', 'job_history', 'authenticated', array[]::text[],
    'authenticated: no privilege on job_history');
select table_privs_are('jobkit', 'job_types', 'authenticated', array[]::text[],
    'authenticated: no privilege on job_types');
select table_privs_are('jobkit', 'settings', 'authenticated', array[]::text[],
    'authenticated: no privilege on settings');
select table_privs_are('jobkit', 'secrets', 'authenticated', array[]::text[],
    'authenticated: no privilege on secrets');
select table_privs_are('jobkit', 'wakeups', 'authenticated', array[]::text[],
    'authenticated: no privilege on wakeups');
select table_privs_are('jobkit', 'rate_limits', 'authenticated', array[]::text[],
    'authenticated: no privilege on rate_limits');
select table_privs_are('jobkit', 'schedules', 'authenticated', array[]::text[],
    'authenticated: no privilege on schedules');
select table_privs_are('jobkit', 'schema_migrations', 'authenticated', array[]::text[],
    'authenticated: no privilege on schema_migrations');
select table_privs_are('jobkit', 'jobs', 'service_role', array['SELECT', 'INSERT', 'UPDATE', 'DELETE'],
    'service_role may read and write jobs (and nothing more: no TRUNCATE)');

-- And the same for everything else in the schema, including what later migrations add.
select is_empty(
    $$select c.oid::regclass, r.role
      from pg_catalog.pg_class c cross join (values ('anon'), ('authenticated')) r(role)
      where c.relnamespace = 'jobkit'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'f')
        and has_table_privilege(r.role, c.oid,
                                'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')$$,
    'anon and authenticated have no privilege on any jobkit table or view'
);
select is_empty(
    $$select c.oid::regclass, r.role
      from pg_catalog.pg_class c cross join (values ('anon'), ('authenticated')) r(role)
      where c.relnamespace = 'jobkit'::regnamespace and c.relkind = 'S'
        and has_sequence_privilege(r.role, c.oid, 'USAGE, SELECT, UPDATE')$$,
    'anon and authenticated have no privilege on any jobkit sequence'
);
select is_empty(
    $$select p.oid::regprocedure, r.role
      from pg_catalog.pg_proc p cross join (values ('anon'), ('authenticated')) r(role)
      where p.pronamespace = 'jobkit'::regnamespace and has_function_privilege(r.role, p.oid, 'EXECUTE')$$,
    'anon and authenticated can execute no jobkit function (nor can PUBLIC)'
);
select is_empty(
    $$select p.oid::regprocedure from pg_catalog.pg_proc p
      where p.pronamespace = 'jobkit'::regnamespace
        and not has_function_privilege('service_role', p.oid, 'EXECUTE')$$,
    'service_role can execute every jobkit function'
);

-- The API functions by name: anon no, authenticated no, service_role yes.
select results_eq(
    $$select p.proname::text collate "default",
             has_function_privilege('anon', p.oid, 'EXECUTE'),
             has_function_privilege('authenticated', p.oid, 'EXECUTE'),
             has_function_privilege('service_role', p.oid, 'EXECUTE')
      from pg_catalog.pg_proc p
      where p.pronamespace = 'jobkit'::regnamespace
        and p.proname in ('enqueue', 'enqueue_many', 'pick_job', 'pick_jobs', 'claim_jobs',
                          'complete_job', 'complete_jobs', 'fail_job', 'fail_jobs', 'snooze_job',
                          'extend_lease', 'sweep_stuck', 'sweep_dead', 'retry_job', 'cancel_job',
                          'prune', 'wake', 'wake_all')
      order by 1$$,
    $$values ('cancel_job', false, false, true), ('claim_jobs', false, false, true),
             ('complete_job', false, false, true), ('complete_jobs', false, false, true),
             ('enqueue', false, false, true), ('enqueue_many', false, false, true),
             ('extend_lease', false, false, true), ('fail_job', false, false, true),
             ('fail_jobs', false, false, true), ('pick_job', false, false, true),
             ('pick_jobs', false, false, true), ('prune', false, false, true),
             ('retry_job', false, false, true), ('snooze_job', false, false, true),
             ('sweep_dead', false, false, true), ('sweep_stuck', false, false, true),
             ('wake', false, false, true), ('wake_all', false, false, true)$$,
    'the 18 API functions: executable by service_role only'
);
select function_privs_are('jobkit', 'enqueue',
    array['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer', 'text', 'jsonb', 'text', 'interval', 'interval'],
    'anon', array[]::text[], 'anon cannot execute enqueue');
select function_privs_are('jobkit', 'enqueue',
    array['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer', 'text', 'jsonb', 'text', 'interval', 'interval'],
    'service_role', array['EXECUTE'], 'service_role can execute enqueue');

-- SECURITY DEFINER functions pin search_path to '' (and so does every other jobkit function).
select isnt_empty(
    $$select p.oid from pg_catalog.pg_proc p
      where p.pronamespace = 'jobkit'::regnamespace and p.prosecdef$$,
    'jobkit has SECURITY DEFINER functions (wake, wake_all, ...)'
);
select is_empty(
    $$select p.oid::regprocedure, p.proconfig from pg_catalog.pg_proc p
      where p.pronamespace = 'jobkit'::regnamespace and p.prosecdef
        and not coalesce('search_path=""' = any (p.proconfig), false)$$,
    'every SECURITY DEFINER function sets search_path = '''''
);
select is_empty(
    $$select p.oid::regprocedure, p.proconfig from pg_catalog.pg_proc p
      where p.pronamespace = 'jobkit'::regnamespace
        and not exists (select 1 from unnest(p.proconfig) c where c like 'search_path=%')$$,
    'every jobkit function pins its search_path'
);

-- As anon: refused before RLS is even consulted (42501, permission denied).
set local role anon;
select throws_ok($$select jobkit.enqueue('t', '{}')$$, '42501', null, 'anon cannot enqueue');
select throws_ok($$select * from jobkit.jobs$$, '42501', null, 'anon cannot select from jobkit.jobs');
select throws_ok($$insert into jobkit.jobs (type, payload) values ('t', '{}')$$, '42501', null,
    'anon cannot insert into jobkit.jobs');
select throws_ok($$select * from jobkit.pick_jobs('t', 1, 'w', '1 minute')$$, '42501', null,
    'anon cannot claim jobs');
select throws_ok($$select * from jobkit.secrets$$, '42501', null, 'anon cannot read jobkit.secrets');
reset role;

-- As authenticated: the same.
set local role authenticated;
select throws_ok($$select jobkit.enqueue('t', '{}')$$, '42501', null, 'authenticated cannot enqueue');
select throws_ok($$select * from jobkit.jobs$$, '42501', null,
    'authenticated cannot select from jobkit.jobs');
select throws_ok($$update jobkit.jobs set status = 'completed'$$, '42501', null,
    'authenticated cannot update jobkit.jobs');
select throws_ok($$select jobkit.complete_job(gen_random_uuid(), 1, '{}')$$, '42501', null,
    'authenticated cannot complete jobs');
select throws_ok($$select * from jobkit.secrets$$, '42501', null,
    'authenticated cannot read jobkit.secrets');
reset role;

-- As service_role: the API works.
set local role service_role;
select lives_ok($$select jobkit.enqueue('pgtap_security', '{}')$$, 'service_role can enqueue');
select is((select count(*) from jobkit.jobs where type = 'pgtap_security'), 1::bigint,
    'service_role sees the job it enqueued');
reset role;

select * from finish();
rollback;
