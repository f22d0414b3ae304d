-- jobkit's per-user job API (optional: [user_api] in jobkit.toml), for the app's signed-in users
-- (Supabase's `authenticated` role, through PostgREST / supabase-js). Add the schema to the project's
-- "Exposed schemas". Applied by `jobkit deploy` after the migrations; re-running it is harmless.
--
-- What a signed-in user gets, and nothing else:
--   {{ u }}.enqueue(type, payload)  enqueue a job of a type the config opens to users: the job's
--                                   owner is the caller (from the JWT, never a parameter), the
--                                   payload is size-limited and each user has a token bucket.
--   {{ u }}.jobs                    their own jobs' status, progress, result and a one-line error:
--                                   a table kept by a trigger on jobkit's jobs, readable under RLS
--                                   (owner = the caller), so Realtime's postgres_changes can stream
--                                   it to the browser filtered the same way.
--   {{ u }}.cancel(id)              cancel their own pending job; false for anything else (another
--                                   user's job, an unknown id, a running one), so it reveals nothing.
-- anon gets nothing. jobkit's own schema stays closed to both.
--
-- Why a table and postgres_changes rather than Realtime broadcast: RLS on one narrow table is the
-- whole access rule (the same policy answers PostgREST reads and Realtime subscriptions), it works
-- on every Supabase project without private-channel setup, and only owned jobs' rows reach the WAL
-- stream Realtime reads (the jobs table itself is never published).

-- Names below resolve in pg_catalog whatever the deploying session's search_path (objects planted
-- in public are never bound into a default, a constraint or a policy); for this transaction only.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
create schema if not exists {{ u }};
revoke all on schema {{ u }} from public;

create table if not exists {{ u }}.jobs (
    id         uuid primary key,
    owner      uuid not null,
    type       text not null,
    status     text not null,
    progress   jsonb,
    result     jsonb,
    error      text,  -- the last line of the last error (no traceback, no server internals)
    created_at timestamptz not null,
    updated_at timestamptz not null
);
create index if not exists jobs_owner_idx on {{ u }}.jobs (owner, created_at);
alter table {{ u }}.jobs enable row level security;
alter table {{ u }}.jobs replica identity full;  -- Realtime checks RLS on deletes' old rows too
comment on table {{ u }}.jobs is 'jobkit: each user''s own jobs (RLS: owner = the caller); kept by a trigger.';

-- The caller's user id from the JWT claims PostgREST (and Realtime) set: what auth.uid() returns on
-- Supabase, without needing Supabase's auth schema.
create or replace function {{ u }}.caller() returns uuid
language sql stable set search_path = '' as $$
    select nullif(coalesce(
        pg_catalog.current_setting('request.jwt.claim.sub', true),
        nullif(pg_catalog.current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub'
    ), '')::uuid
$$;

drop policy if exists own_jobs on {{ u }}.jobs;
create policy own_jobs on {{ u }}.jobs for select using (owner = (select {{ u }}.caller()));

create or replace function {{ u }}.enqueue(p_type text, p_payload jsonb default '{}') returns uuid
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_owner uuid := {{ u }}.caller();
    v_key text;
    v_id uuid;
begin
    if v_owner is null then
        raise exception 'sign in to enqueue jobs' using errcode = '42501';
    end if;
    if p_type is null or not (p_type = any(array[{% for t in user_api.types %}{{ t | literal }}{{ ", " if not loop.last }}{% endfor %}]::text[])) then
        raise exception 'job type % is not open to users', p_type using errcode = '42501',
            hint = 'list it in [user_api] types in jobkit.toml';
    end if;
    if p_payload is null or pg_catalog.octet_length(p_payload::text) > {{ user_api.max_payload_bytes }} then
        raise exception 'the payload is over {{ user_api.max_payload_bytes }} bytes' using errcode = 'PT413';
    end if;
    v_key := 'user:' || v_owner::text;
    insert into {{ s }}.rate_limits (key, rate, burst, tokens)
    values (v_key, {{ user_api.limit.rate }}, {{ user_api.limit.burst }}, {{ user_api.limit.burst }})
    on conflict (key) do nothing;
    if {{ s }}.take_tokens(v_key, 1) < 1 then
        raise exception 'too many jobs: try again later' using errcode = 'PT429';
    end if;
    -- Through jobkit's enqueue (concurrency keys, the wake-up), then owned: the job is not visible to
    -- anyone before this transaction commits, so it is never seen without its owner.
    v_id := {{ s }}.enqueue(p_type, p_payload);
    update {{ s }}.jobs j set owner = v_owner where j.id = v_id;
    return v_id;
end
$$;

create or replace function {{ u }}.cancel(p_id uuid) returns boolean
language plpgsql volatile security definer set search_path = '' as $$
begin
    if not exists (select 1 from {{ s }}.jobs j
                   where j.id = p_id and j.owner = {{ u }}.caller() and j.status = 'pending') then
        return false;
    end if;
    return {{ s }}.cancel_job(p_id);
end
$$;

-- Keep {{ u }}.jobs in step with the owned jobs (the trigger's WHEN skips every other job).
create or replace function {{ u }}.sync_job() returns trigger
language plpgsql volatile security definer set search_path = '' as $$
begin
    if tg_op = 'DELETE' then
        delete from {{ u }}.jobs where id = old.id;
        return null;
    end if;
    insert into {{ u }}.jobs (id, owner, type, status, progress, result, error, created_at, updated_at)
    values (new.id, new.owner, new.type, new.status, new.progress,
            case when new.status = 'completed' then new.result end,
            case when new.status in ('failed', 'dead') then pg_catalog.left(pg_catalog.substring(
                pg_catalog.rtrim(coalesce(new.last_error, ''), E' \n'), E'[^\n]*$'), 300) end,
            new.created_at, pg_catalog.now())
    on conflict (id) do update
    set status = excluded.status, progress = excluded.progress, result = excluded.result,
        error = excluded.error, updated_at = excluded.updated_at
    where ({{ u }}.jobs.status, {{ u }}.jobs.progress, {{ u }}.jobs.result, {{ u }}.jobs.error)
          is distinct from (excluded.status, excluded.progress, excluded.result, excluded.error);
    return null;
end
$$;

drop trigger if exists jobs_user_sync on {{ s }}.jobs;
create trigger jobs_user_sync after insert or update of status, progress, result, last_error, owner
    on {{ s }}.jobs
    for each row when (new.owner is not null) execute function {{ u }}.sync_job();
drop trigger if exists jobs_user_forget on {{ s }}.jobs;
create trigger jobs_user_forget after delete on {{ s }}.jobs
    for each row when (old.owner is not null) execute function {{ u }}.sync_job();

revoke all on all tables in schema {{ u }} from public;
revoke all on all functions in schema {{ u }} from public;

do $grants$
declare
    v_schema constant text := {{ user_api.schema | literal }};
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'anon') then
        execute pg_catalog.format('revoke all on schema %I from anon', v_schema);
        execute pg_catalog.format('revoke all on all tables in schema %I from anon', v_schema);
        execute pg_catalog.format('revoke all on all functions in schema %I from anon', v_schema);
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'authenticated') then
        execute pg_catalog.format('grant usage on schema %I to authenticated', v_schema);
        execute pg_catalog.format('revoke all on all tables in schema %I from authenticated', v_schema);
        execute pg_catalog.format('grant select on %I.jobs to authenticated', v_schema);
        execute pg_catalog.format('revoke all on all functions in schema %I from authenticated', v_schema);
        execute pg_catalog.format('grant execute on function %I.enqueue(text, jsonb), %I.cancel(uuid), '
                                  '%I.caller() to authenticated', v_schema, v_schema, v_schema);
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'service_role') then
        execute pg_catalog.format('grant usage on schema %I to service_role', v_schema);
        execute pg_catalog.format('grant select on all tables in schema %I to service_role', v_schema);
    end if;
    -- Realtime streams the table's changes when the project's publication exists (Supabase).
    if exists (select 1 from pg_catalog.pg_publication where pubname = 'supabase_realtime')
       and not exists (select 1 from pg_catalog.pg_publication_tables
                       where pubname = 'supabase_realtime' and schemaname = v_schema and tablename = 'jobs') then
        execute pg_catalog.format('alter publication supabase_realtime add table %I.jobs', v_schema);
    end if;
end
$grants$;
