-- The per-user job API ([user_api] in supabase/jobkit.toml): what a signed-in user (role
-- authenticated, claims as PostgREST sets them) may do, and that two users never see each other's
-- jobs; anon gets nothing. It passes on a database that already holds jobs (of these users too):
-- it looks only at the jobs it enqueues, by their ids.
begin;
set local client_min_messages = warning;
do $$
begin
    if to_regnamespace('extensions') is null then
        create schema extensions;
    end if;
end
$$;
create extension if not exists pgtap with schema extensions;
set local search_path = extensions, public;
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

select plan(18);

select has_table('jobkit_user', 'jobs', 'the user schema has its jobs table');
select is((select relrowsecurity from pg_catalog.pg_class where oid = 'jobkit_user.jobs'::regclass), true,
          'RLS is on for jobkit_user.jobs');
select schema_privs_are('jobkit_user', 'anon', array[]::text[], 'anon has no privilege on schema jobkit_user');
select table_privs_are('jobkit_user', 'jobs', 'authenticated', array['SELECT'],
                       'authenticated may only read jobkit_user.jobs');
select function_privs_are('jobkit_user', 'enqueue', array['text', 'jsonb'], 'authenticated', array['EXECUTE'],
                          'authenticated may enqueue through the API');
select function_privs_are('jobkit_user', 'sync_job', array[]::text[], 'authenticated', array[]::text[],
                          'authenticated may not call the sync trigger function');
select table_privs_are('jobkit', 'jobs', 'authenticated', array[]::text[],
                       'jobkit.jobs stays closed to authenticated');

-- Alice enqueues; Bob cannot see it, count it or cancel it.
set local role authenticated;
select set_config('request.jwt.claims', '{"role": "authenticated", "sub": "00000000-0000-4000-8000-00000000000a"}', true);
select set_config('test.alice_job', jobkit_user.enqueue('export_report', '{"month": "2026-11"}')::text, true);
select isnt(nullif(current_setting('test.alice_job'), ''), null, 'Alice enqueues an export');
select throws_ok($$select jobkit_user.enqueue('send_email', '{}')$$, '42501', null,
                 'a type not open to users is refused');
select throws_ok($$select jobkit_user.enqueue('export_report', jsonb_build_object('x', repeat('y', 5000)))$$,
                 'PT413', null, 'a payload over max_payload_bytes is refused');
select is((select count(*)::int from jobkit_user.jobs where id = current_setting('test.alice_job')::uuid), 1,
          'Alice sees her job');
select is((select status from jobkit_user.jobs where id = current_setting('test.alice_job')::uuid), 'pending',
          'it is pending');

select set_config('request.jwt.claims', '{"role": "authenticated", "sub": "00000000-0000-4000-8000-00000000000b"}', true);
select is((select count(*)::int from jobkit_user.jobs where owner = '00000000-0000-4000-8000-00000000000a'), 0,
          'Bob sees none of Alice''s jobs');
select is(jobkit_user.cancel(current_setting('test.alice_job')::uuid), false,
          'Bob cannot cancel Alice''s job (the same false as for an unknown id)');
reset role;
select is((select owner || ' ' || status from jobkit.jobs where id = current_setting('test.alice_job')::uuid),
          '00000000-0000-4000-8000-00000000000a pending', 'the job is Alice''s (from her JWT) and still pending');

-- Third-party auth (Clerk, Auth0, Firebase, Cognito): the subject is any text, not a UUID.
set local role authenticated;
select set_config('request.jwt.claims', '{"role": "authenticated", "sub": "auth0|5f7c8ec7c33c6c004bbafe82"}', true);
select set_config('test.carol_job', jobkit_user.enqueue('export_report', '{}')::text, true);
select is((select owner from jobkit_user.jobs where id = current_setting('test.carol_job')::uuid),
          'auth0|5f7c8ec7c33c6c004bbafe82', 'an Auth0 user enqueues and sees their job');
select is(jobkit_user.cancel(current_setting('test.carol_job')::uuid), true, 'and cancels it');
reset role;

set local role anon;
select throws_ok($$select count(*) from jobkit_user.jobs$$, '42501', null, 'anon cannot read the user API');
reset role;

select * from finish();
rollback;
