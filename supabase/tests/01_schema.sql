-- jobkit's schema and tables, as the migration in ../migrations installs them.
-- Run with `supabase test db` (pg_prove --ext .pg --ext .sql -r supabase/tests).
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

select plan(45);

-- The schema and every table.
select has_schema('jobkit', 'schema jobkit exists');
select has_table('jobkit'::name, 'jobs'::name, 'table jobkit.jobs exists');
select has_table('jobkit'::name, 'job_attempts'::name, 'table jobkit.job_attempts exists');
select has_view('jobkit'::name, 'job_history'::name, 'view jobkit.job_history exists');
select has_table('jobkit'::name, 'job_types'::name, 'table jobkit.job_types exists');
select has_table('jobkit'::name, 'settings'::name, 'table jobkit.settings exists');
select has_table('jobkit'::name, 'secrets'::name, 'table jobkit.secrets exists');
select has_table('jobkit'::name, 'wakeups'::name, 'table jobkit.wakeups exists');
select has_table('jobkit'::name, 'rate_limits'::name, 'table jobkit.rate_limits exists');
select has_table('jobkit'::name, 'schedules'::name, 'table jobkit.schedules exists');
select has_table('jobkit'::name, 'schema_migrations'::name, 'table jobkit.schema_migrations exists');

-- jobs: key columns, their types and defaults.
select col_is_pk('jobkit', 'jobs', 'id', 'jobs.id is the primary key');
select col_type_is('jobkit', 'jobs', 'id', 'uuid', 'jobs.id is uuid');
select col_type_is('jobkit', 'jobs', 'type', 'text', 'jobs.type is text');
select col_type_is('jobkit', 'jobs', 'payload', 'jsonb', 'jobs.payload is jsonb');
select col_type_is('jobkit', 'jobs', 'status', 'text', 'jobs.status is text');
select col_type_is('jobkit', 'jobs', 'priority', 'integer', 'jobs.priority is integer');
select col_type_is('jobkit', 'jobs', 'attempts', 'integer', 'jobs.attempts is integer');
select col_type_is('jobkit', 'jobs', 'max_attempts', 'integer', 'jobs.max_attempts is integer');
select col_type_is('jobkit', 'jobs', 'scheduled_for', 'timestamp with time zone', 'jobs.scheduled_for is timestamptz');
select col_type_is('jobkit', 'jobs', 'lease_expires_at', 'timestamp with time zone', 'jobs.lease_expires_at is timestamptz');
select col_type_is('jobkit', 'jobs', 'idempotency_key', 'text', 'jobs.idempotency_key is text');
select col_type_is('jobkit', 'jobs', 'result', 'jsonb', 'jobs.result is jsonb');
select col_type_is('jobkit', 'jobs', 'trace_context', 'jsonb', 'jobs.trace_context is jsonb (0004)');

select col_not_null('jobkit', 'jobs', 'status', 'jobs.status is not null');
select col_not_null('jobkit', 'jobs', 'payload', 'jobs.payload is not null');
select col_default_is('jobkit', 'jobs', 'status', 'pending'::text, 'jobs.status defaults to pending');
select col_default_is('jobkit', 'jobs', 'priority', 0, 'jobs.priority defaults to 0');
select col_default_is('jobkit', 'jobs', 'attempts', 0, 'jobs.attempts defaults to 0');
select col_hasnt_default('jobkit', 'jobs', 'max_attempts', 'jobs.max_attempts has no default (null: the handler''s or the type''s)');
select col_default_is('jobkit', 'jobs', 'scheduled_for', 'now()', 'jobs.scheduled_for defaults to now()');

-- The status CHECK: exactly the eight states (0018 added waiting and blocked for workflows), and
-- anything else is refused (23514).
select col_has_check('jobkit', 'jobs', 'status', 'jobs.status has a CHECK constraint');
-- An upgrade applied by the Supabase CLI leaves 0018's wider check NOT VALID (it holds for every
-- row written since; the rows before it were checked by a narrower one); `jobkit deploy` validates it.
select is(
    (select pg_catalog.regexp_replace(pg_get_constraintdef(c.oid), ' NOT VALID$', '')
     from pg_catalog.pg_constraint c
     where c.conrelid = 'jobkit.jobs'::regclass and c.conname = 'jobs_status_check'),
    'CHECK ((status = ANY (''{pending,processing,completed,failed,dead,cancelled,waiting,blocked}''::text[])))',
    'jobs_status_check allows exactly pending, processing, completed, failed, dead, cancelled, waiting, blocked'
);
select throws_ok(
    $$insert into jobkit.jobs (type, payload, status) values ('pgtap', '{}', 'running')$$,
    '23514', null, 'an unknown status is refused by the CHECK'
);
select throws_ok(
    $$insert into jobkit.jobs (type, payload, status) values ('pgtap', '{}', 'processing')$$,
    '23514', null, 'processing without a lease is refused'
);

-- The claim index the pickers rely on.
select has_index('jobkit', 'jobs', 'jobs_claim_idx', 'jobs_claim_idx exists');

-- The other tables' key columns.
select col_type_is('jobkit', 'job_attempts', 'job_id', 'uuid', 'job_attempts.job_id is uuid');
select col_type_is('jobkit', 'job_attempts', 'outcome', 'text', 'job_attempts.outcome is text');
select col_is_pk('jobkit', 'job_types', 'type', 'job_types.type is the primary key');
select col_type_is('jobkit', 'job_types', 'lease', 'interval', 'job_types.lease is interval');
select col_type_is('jobkit', 'settings', 'value', 'jsonb', 'settings.value is jsonb');
select col_is_pk('jobkit', 'schema_migrations', 'version', 'schema_migrations.version is the primary key');

-- Seed rows the migration writes: the defaults row, the history of the first migrations.
select results_eq(
    $$select max_attempts, lease from jobkit.job_types where type = '*'$$,
    $$values (3, interval '5 minutes')$$,
    'job_types holds the defaults row * (3 attempts, 5 minute lease)'
);
select set_has(
    $$select version from jobkit.schema_migrations$$,
    $$values ('0001')$$,
    'schema_migrations records the baseline migration 0001 (jobkit deploy skips it)'
);
select is(
    (select count(*) from jobkit.schema_migrations where checksum !~ '^[0-9a-f]{64}$'),
    0::bigint,
    'every history row carries a sha256 checksum'
);

select * from finish();
rollback;
