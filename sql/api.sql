-- jobkit's API schema for Supabase's Data API (optional: `[api] schema = "jobkit_api"`).
-- PostgREST only reaches schemas listed in the project's "Exposed schemas"; jobkit's own schema
-- stays unexposed and this one holds thin wrappers around the lifecycle functions, executable by
-- service_role only (anon and authenticated get nothing). Applied by `jobkit deploy` after the
-- migrations; re-running it is harmless.
-- Names below resolve in pg_catalog whatever the deploying session's search_path (objects planted
-- in public are never bound into a default, a constraint or a policy); for this transaction only.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
create schema if not exists {{ api }};
revoke all on schema {{ api }} from public;

-- Signatures of earlier jobkit versions (a parameter added: a new signature, the old one dropped).
drop function if exists {{ api }}.enqueue(text, jsonb, int, timestamptz, int, text, interval);
drop function if exists {{ api }}.enqueue(text, jsonb, int, timestamptz, int, text, interval, jsonb);
drop function if exists {{ api }}.enqueue_many(text[], jsonb, int[], timestamptz[], int[], text[]);
drop function if exists {{ api }}.enqueue_many(text[], jsonb, int[], timestamptz[], int[], text[], jsonb);

create or replace function {{ api }}.enqueue(
    p_type text, p_payload jsonb, p_priority int default 0, p_run_at timestamptz default null,
    p_max_attempts int default null, p_idempotency_key text default null, p_delay interval default null,
    p_trace_context jsonb default null, p_concurrency_key text default null, p_debounce interval default null,
    p_throttle interval default null
) returns uuid language sql volatile set search_path = '' as $$
    select {{ s }}.enqueue(p_type, p_payload, p_priority,
                           coalesce(p_run_at, pg_catalog.now() + coalesce(p_delay, interval '0')),
                           p_max_attempts, p_idempotency_key, p_trace_context, p_concurrency_key, p_debounce,
                           p_throttle)
$$;

-- JSON values in arrays arrive as one jsonb array, not jsonb[]: PostgREST reads arguments with
-- json_to_record, which turns a JSON array inside a jsonb[] argument into another array dimension
-- (a list payload or result would be mangled or rejected).
drop function if exists {{ api }}.enqueue_many(text[], jsonb[], int[], timestamptz[], int[], text[]);
drop function if exists {{ api }}.complete_jobs(uuid[], int[], jsonb[]);
drop function if exists {{ api }}.enqueue_many(text[], jsonb, int[], timestamptz[], int[], text[]);

create or replace function {{ api }}.enqueue_many(
    p_type text[], p_payload jsonb, p_priority int[] default null, p_run_at timestamptz[] default null,
    p_max_attempts int[] default null, p_idempotency_key text[] default null, p_trace_context jsonb default null,
    p_concurrency_key text[] default null
) returns table (ord bigint, id uuid) language sql volatile set search_path = '' as $$
    select * from {{ s }}.enqueue_many(
        p_type, array(select e.v from pg_catalog.jsonb_array_elements(p_payload) with ordinality e(v, n)
                      order by e.n),
        p_priority, p_run_at, p_max_attempts, p_idempotency_key, p_trace_context, p_concurrency_key)
$$;

-- Signatures of earlier jobkit versions (a changed return type or argument list needs a drop).
drop function if exists {{ api }}.claim_jobs(text, int, text, interval, text);
drop function if exists {{ api }}.fail_jobs(uuid[], int[], text[], interval[], boolean[], int[]);
drop function if exists {{ api }}.worker_token();
-- Names of earlier jobkit versions: each wrapper now has its lifecycle step's name (the backend
-- protocol's method, lifecycle.Statements' query), so the old names go.
drop function if exists {{ api }}.claim_jobs(text, int, text, interval, text, int);
drop function if exists {{ api }}.complete_jobs(uuid[], int[], jsonb);
drop function if exists {{ api }}.fail_jobs(uuid[], int[], text[], interval[], boolean[]);
drop function if exists {{ api }}.snooze_job(uuid, int, interval);
drop function if exists {{ api }}.extend_leases(uuid[], int[], interval);
drop function if exists {{ api }}.release_jobs(uuid[], int[]);
drop function if exists {{ api }}.token_wait_seconds(text);
drop function if exists {{ api }}.get_job(uuid);
drop function if exists {{ api }}.job_state(uuid);
drop function if exists {{ api }}.set_progress(uuid[], int[], jsonb);
drop function if exists {{ api }}.next_due_in(text);
-- claim's result gained trace_context (0004): a changed return type needs a drop (dropped and
-- created again on every run: the same definition, so deploy sees no change).
drop function if exists {{ api }}.claim(text, int, text, interval, text, int);

create or replace function {{ api }}.claim(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null,
    p_max_attempts int default null
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text, trace_context jsonb)
language sql volatile set search_path = '' as $$
    select * from {{ s }}.claim_jobs(p_type, p_limit, p_worker, p_lease, p_rate_key, p_max_attempts)
$$;

create or replace function {{ api }}.complete(p_ids uuid[], p_attempts int[], p_results jsonb)
returns setof uuid language sql volatile set search_path = '' as $$
    select * from {{ s }}.complete_jobs(p_ids, p_attempts, array(
        select e.v from pg_catalog.jsonb_array_elements(p_results) with ordinality e(v, n) order by e.n))
$$;

create or replace function {{ api }}.fail(
    p_ids uuid[], p_attempts int[], p_errors text[], p_retry_in interval[] default null,
    p_permanent boolean[] default null
) returns table (id uuid, status text) language sql volatile set search_path = '' as $$
    select * from {{ s }}.fail_jobs(p_ids, p_attempts, p_errors, p_retry_in, p_permanent)
$$;

create or replace function {{ api }}.snooze(p_id uuid, p_attempt int, p_delay interval)
returns boolean language sql volatile set search_path = '' as $$
    select {{ s }}.snooze_job(p_id, p_attempt, p_delay)
$$;

create or replace function {{ api }}.suspend(
    p_id uuid, p_attempt int, p_step text, p_occurrence int, p_kind text, p_events text[] default null,
    p_keys text[] default null, p_due timestamptz default null, p_job_ids uuid[] default null,
    p_delay interval default null
) returns text language sql volatile set search_path = '' as $$
    select {{ s }}.suspend_job(p_id, p_attempt, p_step, p_occurrence, p_kind, p_events, p_keys, p_due,
                               p_job_ids, p_delay)
$$;

create or replace function {{ api }}.emit(p_name text, p_key text default null, p_data jsonb default null,
                                          p_id text default null)
returns bigint language sql volatile set search_path = '' as $$
    select {{ s }}.emit(p_name, p_key, p_data, p_id)
$$;

create or replace function {{ api }}.extend(p_ids uuid[], p_attempts int[], p_by interval)
returns setof uuid language sql volatile set search_path = '' as $$
    select * from {{ s }}.extend_leases(p_ids, p_attempts, p_by)
$$;

create or replace function {{ api }}.release(p_ids uuid[], p_attempts int[])
returns setof uuid language sql volatile set search_path = '' as $$
    select * from {{ s }}.release_jobs(p_ids, p_attempts)
$$;

create or replace function {{ api }}.running_check(p_ids uuid[], p_attempts int[])
returns table (id uuid, status text) language sql volatile set search_path = '' as $$
    select * from {{ s }}.running_check(p_ids, p_attempts)
$$;

create or replace function {{ api }}.take_tokens(p_key text, p_want int)
returns int language sql volatile set search_path = '' as $$
    select {{ s }}.take_tokens(p_key, p_want)
$$;

create or replace function {{ api }}.token_wait(p_key text)
returns float8 language sql volatile set search_path = '' as $$
    select extract(epoch from {{ s }}.token_wait(p_key))::pg_catalog.float8
$$;

create or replace function {{ api }}.due_count(p_type text)
returns int language sql volatile set search_path = '' as $$
    select {{ s }}.due_count(p_type)
$$;

create or replace function {{ api }}.due_types()
returns setof text language sql volatile set search_path = '' as $$
    select * from {{ s }}.pending_types()
$$;

create or replace function {{ api }}.get(p_id uuid)
returns setof {{ s }}.jobs language sql stable set search_path = '' as $$
    select * from {{ s }}.jobs j where j.id = p_id
$$;

-- A job's state for a waiting producer (jobkit.wait polls it): no payload, no history.
create or replace function {{ api }}.state(p_id uuid)
returns table (id uuid, status text, result jsonb, last_error text, attempts int, progress jsonb,
               completed_at timestamptz)
language sql stable set search_path = '' as $$
    select j.id, j.status, j.result, j.last_error, j.attempts, j.progress, j.completed_at
    from {{ s }}.jobs j where j.id = p_id
$$;

-- Progress that handlers reported (ctx.progress), for running attempts; fenced.
create or replace function {{ api }}.progress(p_ids uuid[], p_attempts int[], p_progress jsonb)
returns setof uuid language sql volatile set search_path = '' as $$
    select * from {{ s }}.set_progress(p_ids, p_attempts, p_progress)
$$;

create or replace function {{ api }}.next_due(p_type text)
returns float8 language sql volatile set search_path = '' as $$
    select extract(epoch from {{ s }}.next_due(p_type) - pg_catalog.now())::pg_catalog.float8
$$;

create or replace function {{ api }}.worker_keys()
returns table (current_secret text, previous_secret text)
language sql volatile set search_path = '' as $$
    select * from {{ s }}.worker_keys()
$$;

-- Durable steps (issue 25): jobs' completed steps, and steps' records fenced by their attempts.
create or replace function {{ api }}.load_steps(p_ids uuid[])
returns table (job_id uuid, name text, occurrence int, result jsonb)
language sql stable set search_path = '' as $$
    select * from {{ s }}.load_steps(p_ids)
$$;

create or replace function {{ api }}.save_steps(
    p_ids uuid[], p_attempts int[], p_names text[], p_occurrences int[], p_results jsonb,
    p_errors text[], p_tries int[], p_started_at timestamptz[], p_hold boolean default false
) returns table (id uuid, attempt int) language sql volatile set search_path = '' as $$
    select * from {{ s }}.save_steps(p_ids, p_attempts, p_names, p_occurrences, p_results, p_errors,
                                     p_tries, p_started_at, p_hold)
$$;

-- Job graphs (issue 25): a job's parents as they ended (ctx.parents); a whole graph in one call.
create or replace function {{ api }}.parents(p_id uuid)
returns table (id uuid, type text, status text, result jsonb, error text, on_parent_failure text)
language sql stable set search_path = '' as $$
    select * from {{ s }}.job_parents(p_id)
$$;

create or replace function {{ api }}.create_flow(
    p_name text, p_types jsonb, p_payloads jsonb, p_parents int[], p_children int[],
    p_policies text[] default null, p_priority int[] default null, p_run_at timestamptz[] default null,
    p_max_attempts int[] default null, p_trace_context jsonb default null
) returns table (flow_id uuid, job_ids uuid[]) language sql volatile set search_path = '' as $$
    select * from {{ s }}.create_flow(p_name, p_types, p_payloads, p_parents, p_children, p_policies, p_priority,
                                      p_run_at, p_max_attempts, p_trace_context)
$$;

-- A flow's jobs for a waiting producer (jobkit.wait on a flow polls it): results once all ended.
create or replace function {{ api }}.flow_state(p_id uuid)
returns table (id uuid, status text, result jsonb, last_error text, attempts int, progress jsonb,
               completed_at timestamptz)
language sql stable set search_path = '' as $$
    select * from {{ s }}.flow_state(p_id)
$$;

-- The wake path (0010): a signed wake-up accepted once per fleet; a worker draining a type.
create or replace function {{ api }}.consume_wake(p_nonce text, p_expires_at timestamptz)
returns boolean language sql volatile set search_path = '' as $$
    select {{ s }}.consume_wake(p_nonce, p_expires_at)
$$;

create or replace function {{ api }}.wake_draining(p_type text, p_for interval)
returns void language sql volatile set search_path = '' as $$
    select {{ s }}.wake_draining(p_type, p_for)
$$;

create or replace function {{ api }}.wake_idle(p_type text, p_handoff boolean default false)
returns boolean language sql volatile set search_path = '' as $$
    select {{ s }}.wake_idle(p_type, p_handoff)
$$;

create or replace function {{ api }}.ping()
returns boolean language sql volatile set search_path = '' as $$
    select true
$$;

create or replace function {{ api }}.record_types(p_types text[])
returns void language sql volatile set search_path = '' as $$
    select {{ s }}.record_types(p_types)
$$;

create or replace function {{ api }}.worker_beat(
    p_id text, p_host text, p_pid int, p_version text, p_transport text, p_concurrency int,
    p_types text[], p_running int, p_heartbeat interval, p_started_at timestamptz
) returns void language sql volatile set search_path = '' as $$
    select {{ s }}.worker_beat(p_id, p_host, p_pid, p_version, p_transport, p_concurrency, p_types, p_running,
                               p_heartbeat, p_started_at)
$$;

create or replace function {{ api }}.worker_gone(p_id text)
returns void language sql volatile set search_path = '' as $$
    select {{ s }}.worker_gone(p_id)
$$;

revoke all on all functions in schema {{ api }} from public;
do $grants$
declare
    v_role text;
begin
    foreach v_role in array array['anon', 'authenticated'] loop
        if exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
            execute pg_catalog.format('revoke all on schema %I from %I', {{ api_name | literal }}, v_role);
            execute pg_catalog.format('revoke all on all functions in schema %I from %I',
                                      {{ api_name | literal }}, v_role);
        end if;
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'service_role') then
        execute pg_catalog.format('grant usage on schema %I to service_role', {{ api_name | literal }});
        execute pg_catalog.format('grant execute on all functions in schema %I to service_role',
                                  {{ api_name | literal }});
    end if;
end
$grants$;
-- PostgREST reloads its schema cache on DDL (Supabase's pgrst_ddl_watch); ask explicitly as well.
notify pgrst, 'reload schema';
