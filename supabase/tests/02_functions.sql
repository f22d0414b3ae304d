-- jobkit's SQL API: every public function with its exact signature and return type.
-- Only the named functions are tested, so later jobkit migrations that add functions keep passing.
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

select plan(44);

-- Enqueue.
select has_function('jobkit', 'enqueue',
    array['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer', 'text', 'jsonb', 'text', 'interval', 'interval'],
    'jobkit.enqueue(text, jsonb, int, timestamptz, int, text, jsonb, text, interval, interval) exists');
select function_returns('jobkit', 'enqueue',
    array['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer', 'text', 'jsonb', 'text', 'interval', 'interval'],
    'uuid', 'enqueue returns uuid');
select has_function('jobkit', 'enqueue_many',
    array['text[]', 'jsonb[]', 'integer[]', 'timestamp with time zone[]', 'integer[]', 'text[]', 'jsonb', 'text[]'],
    'jobkit.enqueue_many(text[], jsonb[], int[], timestamptz[], int[], text[], jsonb, text[]) exists');
select function_returns('jobkit', 'enqueue_many',
    array['text[]', 'jsonb[]', 'integer[]', 'timestamp with time zone[]', 'integer[]', 'text[]', 'jsonb', 'text[]'],
    'setof record', 'enqueue_many returns a set');

-- Claims.
select has_function('jobkit', 'pick_job', array['text'], 'jobkit.pick_job(text) exists');
select function_returns('jobkit', 'pick_job', array['text'], 'setof jobkit.jobs',
    'pick_job returns setof jobkit.jobs');
select has_function('jobkit', 'pick_jobs', array['text', 'integer', 'text', 'interval'],
    'jobkit.pick_jobs(text, int, text, interval) exists');
select function_returns('jobkit', 'pick_jobs', array['text', 'integer', 'text', 'interval'],
    'setof jobkit.jobs', 'pick_jobs returns setof jobkit.jobs');
select has_function('jobkit', 'claim_jobs', array['text', 'integer', 'text', 'interval', 'text', 'integer'],
    'jobkit.claim_jobs(text, int, text, interval, text, int) exists');
select function_returns('jobkit', 'claim_jobs', array['text', 'integer', 'text', 'interval', 'text', 'integer'],
    'setof record', 'claim_jobs returns a set');

-- Fenced completion and failure.
select has_function('jobkit', 'complete_job', array['uuid', 'integer', 'jsonb'],
    'jobkit.complete_job(uuid, int, jsonb) exists');
select function_returns('jobkit', 'complete_job', array['uuid', 'integer', 'jsonb'], 'boolean',
    'complete_job returns boolean');
select has_function('jobkit', 'complete_jobs', array['uuid[]', 'integer[]', 'jsonb[]'],
    'jobkit.complete_jobs(uuid[], int[], jsonb[]) exists');
select function_returns('jobkit', 'complete_jobs', array['uuid[]', 'integer[]', 'jsonb[]'],
    'setof uuid', 'complete_jobs returns setof uuid');
select has_function('jobkit', 'fail_job', array['uuid', 'integer', 'text', 'interval', 'boolean'],
    'jobkit.fail_job(uuid, int, text, interval, boolean) exists');
select function_returns('jobkit', 'fail_job', array['uuid', 'integer', 'text', 'interval', 'boolean'],
    'text', 'fail_job returns text (the new status)');
select has_function('jobkit', 'fail_jobs',
    array['uuid[]', 'integer[]', 'text[]', 'interval[]', 'boolean[]'],
    'jobkit.fail_jobs(uuid[], int[], text[], interval[], boolean[]) exists');
select function_returns('jobkit', 'fail_jobs',
    array['uuid[]', 'integer[]', 'text[]', 'interval[]', 'boolean[]'],
    'setof record', 'fail_jobs returns a set');
select has_function('jobkit', 'snooze_job', array['uuid', 'integer', 'interval'],
    'jobkit.snooze_job(uuid, int, interval) exists');
select function_returns('jobkit', 'snooze_job', array['uuid', 'integer', 'interval'], 'boolean',
    'snooze_job returns boolean');
select has_function('jobkit', 'extend_lease', array['uuid', 'integer', 'interval'],
    'jobkit.extend_lease(uuid, int, interval) exists');
select function_returns('jobkit', 'extend_lease', array['uuid', 'integer', 'interval'],
    'timestamp with time zone', 'extend_lease returns timestamptz');

-- Maintenance.
select has_function('jobkit', 'sweep_stuck', array[]::name[], 'jobkit.sweep_stuck() exists');
select function_returns('jobkit', 'sweep_stuck', array[]::name[], 'setof record',
    'sweep_stuck returns a set');
select has_function('jobkit', 'sweep_dead', array[]::name[], 'jobkit.sweep_dead() exists');
select function_returns('jobkit', 'sweep_dead', array[]::name[], 'bigint', 'sweep_dead returns bigint');
select has_function('jobkit', 'retry_job', array['uuid'], 'jobkit.retry_job(uuid) exists');
select function_returns('jobkit', 'retry_job', array['uuid'], 'boolean', 'retry_job returns boolean');
select has_function('jobkit', 'cancel_job', array['uuid'], 'jobkit.cancel_job(uuid) exists');
select function_returns('jobkit', 'cancel_job', array['uuid'], 'boolean', 'cancel_job returns boolean');
select has_function('jobkit', 'prune', array['interval', 'integer', 'integer'],
    'jobkit.prune(interval, int, int) exists');
select function_returns('jobkit', 'prune', array['interval', 'integer', 'integer'], 'bigint',
    'prune returns bigint');

-- Wake-ups.
select has_function('jobkit', 'wake', array['text', 'integer'], 'jobkit.wake(text, int) exists');
select function_returns('jobkit', 'wake', array['text', 'integer'], 'integer', 'wake returns integer');
select has_function('jobkit', 'wake_all', array[]::name[], 'jobkit.wake_all() exists');
select function_returns('jobkit', 'wake_all', array[]::name[], 'integer', 'wake_all returns integer');

-- The columns of the functions returning a table.
select is(pg_get_function_result('jobkit.enqueue_many(text[], jsonb[], int[], timestamptz[], int[], text[], jsonb, text[])'::regprocedure),
    'TABLE(ord bigint, id uuid)', 'enqueue_many returns table(ord bigint, id uuid)');
select is(pg_get_function_result('jobkit.fail_jobs(uuid[], int[], text[], interval[], boolean[])'::regprocedure),
    'TABLE(id uuid, status text)', 'fail_jobs returns table(id uuid, status text)');
select is(pg_get_function_result('jobkit.claim_jobs(text, int, text, interval, text, int)'::regprocedure),
    'TABLE(id uuid, type text, attempts integer, max_attempts integer, priority integer, payload jsonb, idempotency_key text, trace_context jsonb)',
    'claim_jobs returns what a handler needs');
select is(pg_get_function_result('jobkit.sweep_stuck()'::regprocedure),
    'TABLE(id uuid, status text)', 'sweep_stuck returns table(id uuid, status text)');

-- Argument names and defaults: callers use named arguments (p_type => ...).
select results_eq(
    $$select p.proname::text collate "default", pg_get_function_arguments(p.oid)
      from pg_catalog.pg_proc p
      where p.pronamespace = 'jobkit'::regnamespace
        and p.proname in ('enqueue', 'enqueue_many', 'pick_job', 'pick_jobs', 'claim_jobs',
                          'complete_job', 'complete_jobs', 'fail_job', 'fail_jobs', 'snooze_job',
                          'extend_lease', 'sweep_stuck', 'sweep_dead', 'retry_job', 'cancel_job',
                          'prune', 'wake', 'wake_all')
      order by 1$$,
    $$values
      ('cancel_job', 'p_id uuid'),
      ('claim_jobs', 'p_type text, p_limit integer, p_worker text, p_lease interval, p_rate_key text DEFAULT NULL::text, p_max_attempts integer DEFAULT NULL::integer'),
      ('complete_job', 'p_id uuid, p_attempt integer, p_result jsonb'),
      ('complete_jobs', 'p_ids uuid[], p_attempts integer[], p_results jsonb[]'),
      ('enqueue', 'p_type text, p_payload jsonb, p_priority integer DEFAULT 0, p_run_at timestamp with time zone DEFAULT now(), p_max_attempts integer DEFAULT NULL::integer, p_idempotency_key text DEFAULT NULL::text, p_trace_context jsonb DEFAULT NULL::jsonb, p_concurrency_key text DEFAULT NULL::text, p_debounce interval DEFAULT NULL::interval, p_throttle interval DEFAULT NULL::interval'),
      ('enqueue_many', 'p_type text[], p_payload jsonb[], p_priority integer[] DEFAULT NULL::integer[], p_run_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_max_attempts integer[] DEFAULT NULL::integer[], p_idempotency_key text[] DEFAULT NULL::text[], p_trace_context jsonb DEFAULT NULL::jsonb, p_concurrency_key text[] DEFAULT NULL::text[]'),
      ('extend_lease', 'p_id uuid, p_attempt integer, p_by interval'),
      ('fail_job', 'p_id uuid, p_attempt integer, p_error text, p_retry_in interval DEFAULT NULL::interval, p_permanent boolean DEFAULT false'),
      ('fail_jobs', 'p_ids uuid[], p_attempts integer[], p_errors text[], p_retry_in interval[] DEFAULT NULL::interval[], p_permanent boolean[] DEFAULT NULL::boolean[]'),
      ('pick_job', 'p_type text'),
      ('pick_jobs', 'p_type text, p_limit integer, p_worker text, p_lease interval'),
      ('prune', 'p_older_than interval, p_batch_size integer DEFAULT 5000, p_max_batches integer DEFAULT 100'),
      ('retry_job', 'p_id uuid'),
      ('snooze_job', 'p_id uuid, p_attempt integer, p_delay interval'),
      ('sweep_dead', ''),
      ('sweep_stuck', ''),
      ('wake', 'p_type text, p_max_calls integer DEFAULT NULL::integer'),
      ('wake_all', '')$$,
    'each API function has exactly one overload, with these argument names and defaults'
);

-- The lifecycle API runs with the caller's rights; only the wake-ups run as their owner.
select isnt_definer('jobkit', 'enqueue',
    array['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer', 'text', 'jsonb', 'text', 'interval', 'interval'],
    'enqueue is SECURITY INVOKER');
select isnt_definer('jobkit', 'pick_jobs', array['text', 'integer', 'text', 'interval'],
    'pick_jobs is SECURITY INVOKER');
select is_definer('jobkit', 'wake', array['text', 'integer'], 'wake is SECURITY DEFINER');

select * from finish();
rollback;
