-- jobkit-user-api: acd1185df33a7e19e20235be407aa9a5eb63d035e8d3e94fabf181a60be9be61
-- jobkit's per-user job API (optional: [user_api] in jobkit.toml), for the app's signed-in users
-- (Supabase's `authenticated` role, through PostgREST / supabase-js). Add the schema to the project's
-- "Exposed schemas". Applied by `jobkit deploy` after the migrations; re-running it is harmless.
--
-- What a signed-in user gets, and nothing else:
--   "jobkit_user".enqueue(type, payload)  enqueue a job of a type the config opens to users: the job's
--                                   owner is the caller (the JWT's subject, never a parameter),
--                                   its concurrency key is made from the type's template and the
--                                   owner only (never from the payload), the payload is
--                                   size-limited and each user has a token bucket.
--   "jobkit_user".jobs                    their own jobs' status, progress, result and a one-line error,
--                                   and a durable job's current step (its name and status): a table
--                                   kept by triggers on jobkit's jobs and job_steps, readable under
--                                   RLS (owner = the caller), so Realtime's postgres_changes can
--                                   stream it to the browser filtered the same way.
--   "jobkit_user".cancel(id)              cancel their own pending job; false for anything else (another
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
create schema if not exists "jobkit_user";
revoke all on schema "jobkit_user" from public;

create table if not exists "jobkit_user".jobs (
    id         uuid primary key,
    owner      text not null,  -- the JWT's subject: any text (Supabase Auth's are UUIDs, Clerk's are not)
    type       text not null,
    status     text not null,
    progress   jsonb,
    result     jsonb,
    error      text,  -- the last line of the last error (no traceback, no server internals)
    created_at timestamptz not null,
    updated_at timestamptz not null
);
-- A durable job's current step (ctx.step, a sleep's or a wait's outcome): the job_steps record
-- written last (by finished_at, then started_at), kept by the trigger on jobkit's job_steps below.
-- Added here (not in the create above) for tables made before them: a first deploy after that
-- fills them for the jobs already there (jobkit.user_api_steps).
select pg_catalog.set_config('jobkit.user_api_steps', 'on', true)
where not exists (select 1 from pg_catalog.pg_attribute a
                  where a.attrelid OPERATOR(pg_catalog.=) '"jobkit_user".jobs'::pg_catalog.regclass
                    and a.attname OPERATOR(pg_catalog.=) 'step'::pg_catalog.name and not a.attisdropped);
alter table "jobkit_user".jobs add column if not exists step text;
alter table "jobkit_user".jobs add column if not exists step_status text;  -- 'completed' or 'failed'
alter table "jobkit_user".jobs add column if not exists step_started_at timestamptz;
alter table "jobkit_user".jobs add column if not exists step_finished_at timestamptz;
create index if not exists jobs_owner_idx on "jobkit_user".jobs (owner, created_at);
alter table "jobkit_user".jobs enable row level security;
alter table "jobkit_user".jobs replica identity full;  -- Realtime checks RLS on deletes' old rows too
comment on table "jobkit_user".jobs is 'jobkit: each user''s own jobs (RLS: owner = the caller); kept by a trigger.';

-- Before 0011 an owner was a uuid, and caller() returned one. The policy names both, so it goes
-- first (it is created again below). Converting this table rewrites it once (owned jobs only, while
-- nothing writes to it: 0011 dropped the triggers); jobkit's jobs table is never rewritten.
drop policy if exists own_jobs on "jobkit_user".jobs;
do $upgrade$
begin
    -- (operators named with their schema: this runs under the deployer's search_path)
    if (select a.atttypid from pg_catalog.pg_attribute a
        where a.attrelid OPERATOR(pg_catalog.=) '"jobkit_user".jobs'::pg_catalog.regclass
          and a.attname OPERATOR(pg_catalog.=) 'owner'::pg_catalog.name and not a.attisdropped)
       OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype then
        alter table "jobkit_user".jobs alter column owner type text;
    end if;
    if (select p.prorettype from pg_catalog.pg_proc p
        where p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('"jobkit_user".caller()'))
       OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype then
        drop function "jobkit_user".caller();
    end if;
end
$upgrade$;

-- The caller's JWT subject from the claims PostgREST (and Realtime) set: what auth.jwt() ->> 'sub'
-- returns on Supabase (any text: third-party auth's subjects are not UUIDs, so not auth.uid()),
-- without needing Supabase's auth schema.
create or replace function "jobkit_user".caller() returns text
language sql stable set search_path = '' as $$
    select nullif(coalesce(
        pg_catalog.current_setting('request.jwt.claim.sub', true),
        nullif(pg_catalog.current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub'
    ), '')
$$;

create policy own_jobs on "jobkit_user".jobs for select using (owner = (select "jobkit_user".caller()));

create or replace function "jobkit_user".enqueue(p_type text, p_payload jsonb default '{}') returns uuid
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_owner text := "jobkit_user".caller();
    v_bucket text;
    v_template jsonb;
    v_fair boolean;
    v_key text;
    v_id uuid;
begin
    if v_owner is null then
        raise exception 'sign in to enqueue jobs' using errcode = '42501';
    end if;
    if pg_catalog.length(v_owner) > 255 then
        raise exception 'the JWT subject is over 255 characters' using errcode = '22023',
            hint = 'jobkit keeps a job''s owner as its JWT sub claim: use an auth provider with shorter subjects';
    end if;
    if p_type is null or not (p_type = any(array['export_report']::text[])) then
        raise exception 'job type % is not open to users', p_type using errcode = '42501',
            hint = 'list it in [user_api] types in jobkit.toml';
    end if;
    if p_payload is null or pg_catalog.octet_length(p_payload::text) > 4096 then
        raise exception 'the payload is over 4096 bytes' using errcode = 'PT413';
    end if;
    -- The job's concurrency key is the owner's, never the payload's: the type's template is rendered
    -- with no payload ({owner} is the caller, a payload field renders as ''), so a user cannot take
    -- another user's or a tenant's slot. A type without a template: '' when fair, else no key.
    select t.key_template, t.fair into v_template, v_fair from "jobkit".job_types t where t.type = p_type;
    v_key := case when v_template is not null then "jobkit"._render_key(v_template, '{}'::jsonb, v_owner)
                  when v_fair then '' end;
    if pg_catalog.length(v_key) > 1000 then
        raise exception 'the job''s concurrency key is over 1000 characters' using errcode = 'PT413',
            hint = pg_catalog.format('shorten [types.%s] concurrency_key in jobkit.toml', p_type);
    end if;
    -- Each user's bucket: 'user:<subject>', or the subject's SHA-256 when it has characters a
    -- rate-limit key cannot hold (Auth0's "auth0|..."); a plain subject never contains ':'.
    v_bucket := case when v_owner ~ '^[A-Za-z0-9_.-]{1,90}$' then 'user:' || v_owner
                     else 'user:sha256:' || pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(v_owner, 'UTF8')), 'hex')
                end;
    insert into "jobkit".rate_limits (key, rate, burst, tokens)
    values (v_bucket, 0.16666666666666666, 5, 5)
    on conflict (key) do nothing;
    if "jobkit".take_tokens(v_bucket, 1) < 1 then
        raise exception 'too many jobs: try again later' using errcode = 'PT429';
    end if;
    -- Through jobkit's enqueue (the wake-up), then owned: the job is not visible to anyone before
    -- this transaction commits, so it is never seen without its owner.
    v_id := "jobkit".enqueue(p_type, p_payload, p_concurrency_key => v_key);
    update "jobkit".jobs j set owner = v_owner where j.id = v_id;
    return v_id;
end
$$;

create or replace function "jobkit_user".cancel(p_id uuid) returns boolean
language plpgsql volatile security definer set search_path = '' as $$
begin
    if not exists (select 1 from "jobkit".jobs j
                   where j.id = p_id and j.owner = "jobkit_user".caller() and j.status = 'pending') then
        return false;
    end if;
    return "jobkit".cancel_job(p_id);
end
$$;

-- Keep "jobkit_user".jobs in step with the owned jobs (the trigger's WHEN skips every other job).
-- The worker names the durable step a job of these types started last in its progress
-- ("step": {"name", "started_at"}, with the throttled progress write: worker/progress.py): it
-- becomes the job's current step, running, unless a record of it or of a later step is there
-- already (a step's record keeps its start time, so a late progress write never hides it). The
-- owner's progress is the handler's own, without it.
create or replace function "jobkit_user".sync_job() returns trigger
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_step jsonb;
begin
    if tg_op = 'DELETE' then
        delete from "jobkit_user".jobs where id = old.id;
        return null;
    end if;
    v_step := new.progress -> 'step';
    insert into "jobkit_user".jobs as m (id, owner, type, status, progress, result, error, created_at, updated_at,
                                   step, step_status, step_started_at)
    values (new.id, new.owner, new.type, new.status,
            case when v_step is null then new.progress else nullif(new.progress - 'step', '{}') end,
            case when new.status = 'completed' then new.result end,
            case when new.status in ('failed', 'dead') then pg_catalog.left(pg_catalog.substring(
                pg_catalog.rtrim(coalesce(new.last_error, ''), E' \n'), E'[^\n]*$'), 300) end,
            new.created_at, pg_catalog.now(),
            v_step ->> 'name', case when v_step is not null then 'running' end,
            (v_step ->> 'started_at')::timestamptz)
    on conflict (id) do update
    set status = excluded.status, progress = excluded.progress, result = excluded.result,
        error = excluded.error, updated_at = excluded.updated_at,
        step = case when excluded.step_started_at > coalesce(m.step_started_at, '-infinity')
                    then excluded.step else m.step end,
        step_status = case when excluded.step_started_at > coalesce(m.step_started_at, '-infinity')
                           then excluded.step_status else m.step_status end,
        step_finished_at = case when excluded.step_started_at > coalesce(m.step_started_at, '-infinity')
                                then null else m.step_finished_at end,
        step_started_at = greatest(excluded.step_started_at, m.step_started_at)
    where (m.status, m.progress, m.result, m.error)
          is distinct from (excluded.status, excluded.progress, excluded.result, excluded.error)
       or excluded.step_started_at > coalesce(m.step_started_at, '-infinity');
    return null;
end
$$;

-- Keep the owned jobs' current step: for each job a statement gave job_steps records (a step
-- completed or failed, a wait's outcome), its latest record becomes the job's step unless a later
-- one is there already. Once per statement (the transition table of its records), one primary-key
-- probe of this table per job in it (a miss for jobs nobody owns; joins forced to nested loops so
-- a cached plan never reads this whole table). Nothing for enqueue, claim or completion, and
-- nothing at all without [user_api].
create or replace function "jobkit_user".sync_steps() returns trigger
language plpgsql volatile security definer set search_path = ''
set enable_hashjoin = off set enable_mergejoin = off as $$
begin
    update "jobkit_user".jobs m
    set step = n.name, step_status = n.status, step_started_at = n.started_at,
        step_finished_at = n.finished_at, updated_at = pg_catalog.now()
    from (select distinct on (c.job_id) c.job_id, c.name, c.status, c.started_at, c.finished_at
          from changed c order by c.job_id, c.finished_at desc, c.started_at desc) n
    where m.id = n.job_id
      and (m.step_finished_at is null
           or (n.finished_at, n.started_at) >= (m.step_finished_at, m.step_started_at))
      and (m.step, m.step_status, m.step_started_at, m.step_finished_at)
          is distinct from (n.name, n.status, n.started_at, n.finished_at);
    return null;
end
$$;

-- After 0011 (which dropped the triggers and the uuid owner column; or on a first deploy, with
-- nothing to do) the triggers are missing, and _resync brings owners and this table up to date:
-- once before the triggers are created, while jobkit's jobs table stays writable (only owned jobs'
-- rows are locked, by the owners copied back), and once after them, for what changed in between
-- (the triggers' locks keep writers to jobkit's jobs waiting until commit: that pass only
-- compares, one primary-key probe of jobkit's jobs per row of this table, and writes what differs).
-- The probes are forced (no hash or merge join, which would read all of jobkit's jobs).
create or replace function "jobkit_user"._resync(p_owners boolean) returns void
language sql volatile set search_path = '' set enable_hashjoin = off set enable_mergejoin = off as $$
    update "jobkit".jobs j set owner = m.owner
    from "jobkit_user".jobs m where p_owners and m.id = j.id and j.owner is null;
    with job as (
        select m.id, j.id is not null as present, j.status, j.progress,
               case when j.status = 'completed' then j.result end as result,
               case when j.status in ('failed', 'dead') then pg_catalog.left(pg_catalog.substring(
                   pg_catalog.rtrim(coalesce(j.last_error, ''), E' \n'), E'[^\n]*$'), 300) end as error,
               t.name as step, t.status as step_status, t.started_at as step_started_at,
               t.finished_at as step_finished_at
        from "jobkit_user".jobs m left join "jobkit".jobs j on j.id = m.id
        left join lateral (
            select t.name, t.status, t.started_at, t.finished_at from "jobkit".job_steps t
            where t.job_id = m.id order by t.finished_at desc, t.started_at desc limit 1
        ) t on true
    ), gone as (
        delete from "jobkit_user".jobs m using job where job.id = m.id and not job.present
    )
    update "jobkit_user".jobs m
    set status = job.status, progress = job.progress, result = job.result, error = job.error,
        step = job.step, step_status = job.step_status, step_started_at = job.step_started_at,
        step_finished_at = job.step_finished_at, updated_at = pg_catalog.now()
    from job
    where job.id = m.id and job.present
      and (m.status, m.progress, m.result, m.error, m.step, m.step_status, m.step_started_at, m.step_finished_at)
          is distinct from (job.status, job.progress, job.result, job.error, job.step, job.step_status,
                            job.step_started_at, job.step_finished_at);
$$;

select pg_catalog.set_config('jobkit.user_api_resync', 'on', true)
where not exists (select 1 from pg_catalog.pg_trigger t
                  where t.tgrelid OPERATOR(pg_catalog.=) '"jobkit".jobs'::pg_catalog.regclass
                    and t.tgname OPERATOR(pg_catalog.=) 'jobs_user_sync'::pg_catalog.name);
select "jobkit_user"._resync(true)
where pg_catalog.current_setting('jobkit.user_api_resync', true) OPERATOR(pg_catalog.=) 'on';
drop trigger if exists jobs_user_sync on "jobkit".jobs;
create trigger jobs_user_sync after insert or update of status, progress, result, last_error, owner
    on "jobkit".jobs
    for each row when (new.owner is not null) execute function "jobkit_user".sync_job();
drop trigger if exists jobs_user_forget on "jobkit".jobs;
create trigger jobs_user_forget after delete on "jobkit".jobs
    for each row when (old.owner is not null) execute function "jobkit_user".sync_job();
-- (a transition table takes one event per trigger: one for the records inserted, one for those
-- an ON CONFLICT replaced)
drop trigger if exists job_steps_user_added on "jobkit".job_steps;
create trigger job_steps_user_added after insert on "jobkit".job_steps
    referencing new table as changed for each statement execute function "jobkit_user".sync_steps();
drop trigger if exists job_steps_user_changed on "jobkit".job_steps;
create trigger job_steps_user_changed after update on "jobkit".job_steps
    referencing new table as changed for each statement execute function "jobkit_user".sync_steps();
select "jobkit_user"._resync(false)
where pg_catalog.current_setting('jobkit.user_api_resync', true) OPERATOR(pg_catalog.=) 'on'
   or pg_catalog.current_setting('jobkit.user_api_steps', true) OPERATOR(pg_catalog.=) 'on';

revoke all on all tables in schema "jobkit_user" from public;
revoke all on all functions in schema "jobkit_user" from public;

do $grants$
declare
    v_schema constant text := 'jobkit_user';
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
