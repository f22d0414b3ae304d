-- jobkit 0003: what the worker endpoint needs. Rate limits shared by every worker instance (a token
-- bucket per key, taken atomically inside the claim), claims that respect them, batched
-- heartbeats and releases, and failures that honour the handler's own max_attempts.

-- One token bucket per key: `rate` tokens per second up to `burst`. The row lock serialises
-- takers, so any number of worker processes together stay under the limit.
create table {{ s }}.rate_limits (
    key        text primary key check (key ~ '^[A-Za-z0-9_.:\-]{1,100}$'),
    rate       float8 not null check (rate > 0),
    burst      int not null check (burst >= 1),
    tokens     float8 not null,
    updated_at timestamptz not null default clock_timestamp()
);

-- The limit key a job type's claims take tokens from (jobkit.toml `[types.T] rate_limit`).
alter table {{ s }}.job_types add column rate_limit text;

-- Take up to p_want tokens from p_key's bucket now; returns how many were granted (0 .. p_want).
-- An unknown key grants everything (no limit configured).
create function {{ s }}.take_tokens(p_key text, p_want int) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_bucket {{ s }}.rate_limits;
    v_now timestamptz;
    v_available float8;
    v_granted int;
begin
    if p_key is null or p_want <= 0 then
        return greatest(p_want, 0);
    end if;
    select * into v_bucket from {{ s }}.rate_limits r where r.key = p_key for update;
    if not found then
        return p_want;
    end if;
    v_now := clock_timestamp();
    v_available := least(v_bucket.burst::float8,
                         v_bucket.tokens + v_bucket.rate * extract(epoch from v_now - v_bucket.updated_at));
    v_granted := least(p_want, floor(v_available)::int);
    update {{ s }}.rate_limits r set tokens = v_available - v_granted, updated_at = v_now
    where r.key = p_key;
    return v_granted;
end
$$;

-- Give back tokens taken but not used (a claim found fewer jobs than it had tokens for).
create function {{ s }}.return_tokens(p_key text, p_count int) returns void
language sql volatile set search_path = '' as $$
    update {{ s }}.rate_limits r set tokens = least(r.burst::float8, r.tokens + p_count)
    where r.key = p_key and p_count > 0
$$;

-- How long until p_key's bucket holds one token (zero when it does, or when there is no limit).
create function {{ s }}.token_wait(p_key text) returns interval
language sql stable set search_path = '' as $$
    select coalesce((
        select make_interval(secs => greatest(0, (1 - least(r.burst::float8,
                   r.tokens + r.rate * extract(epoch from clock_timestamp() - r.updated_at))) / r.rate))
        from {{ s }}.rate_limits r where r.key = p_key
    ), interval '0')
$$;

-- Claim like pick_jobs, but never more jobs than p_rate_key's bucket has tokens for (null: the
-- type's configured rate_limit). No claim-then-snooze churn: unused tokens are returned.
create function {{ s }}.claim_jobs(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null
) returns setof {{ s }}.jobs
language plpgsql volatile set search_path = '' as $$
declare
    v_key text := coalesce(p_rate_key, ({{ s }}.type_settings(p_type)).rate_limit);
    v_tokens int;
    v_claimed int;
begin
    if p_lease is null or p_lease < interval '1 second' then
        raise exception 'jobkit.claim_jobs: p_lease must be at least 1 second' using errcode = '22023';
    end if;
    if v_key is null then
        return query select * from {{ s }}._claim(p_type, p_limit, p_worker, p_lease);
        return;
    end if;
    -- Take tokens only for jobs that exist: count the due ones first (cheap, bounded by p_limit).
    select count(*) into v_claimed from (
        select 1 from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit p_limit
    ) due;
    v_tokens := {{ s }}.take_tokens(v_key, v_claimed);
    if v_tokens = 0 then
        return;
    end if;
    return query select * from {{ s }}._claim(p_type, v_tokens, p_worker, p_lease);
    get diagnostics v_claimed = row_count;
    perform {{ s }}.return_tokens(v_key, v_tokens - v_claimed);
end
$$;

-- The claim itself (shared by pick_jobs and claim_jobs). The ids go through an array so that the
-- update probes the primary key whatever the planner guesses for the (parameter) LIMIT; a join
-- planned generically as a hash join would scan the whole table on every claim.
create function {{ s }}._claim(p_type text, p_limit int, p_worker text, p_lease interval)
returns setof {{ s }}.jobs
language plpgsql volatile set search_path = '' as $$
begin
    return query
    with claimed as (
        update {{ s }}.jobs j
        set status = 'processing',
            attempts = j.attempts + 1,
            started_at = now(),
            lease_expires_at = now() + p_lease,
            worker_id = p_worker,
            updated_at = now()
        where j.id = any (array(
            select c.id from {{ s }}.jobs c
            where c.type = p_type and c.status = 'pending' and c.scheduled_for <= now()
            order by c.priority desc, c.scheduled_for
            limit greatest(p_limit, 0)
            for update skip locked
        ))
        returning j.*
    )
    select * from claimed c order by c.priority desc, c.scheduled_for;
end
$$;

-- pick_jobs keeps its signature and now honours the type's rate limit too.
create or replace function {{ s }}.pick_jobs(p_type text, p_limit int, p_worker text, p_lease interval)
returns setof {{ s }}.jobs
language sql volatile set search_path = '' as $$
    select * from {{ s }}.claim_jobs(p_type, p_limit, p_worker, p_lease, null)
$$;

-- Heartbeat many running attempts at once; returns the ids whose lease was extended.
create function {{ s }}.extend_leases(p_ids uuid[], p_attempts int[], p_by interval) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    update {{ s }}.jobs j
    set lease_expires_at = greatest(j.lease_expires_at, now() + p_by), updated_at = now()
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$;

-- Hand claimed jobs back (a worker shutting down): pending again now, attempt not consumed.
create function {{ s }}.release_jobs(p_ids uuid[], p_attempts int[]) returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    with changed as (
        update {{ s }}.jobs j
        set status = 'pending', attempts = j.attempts - 1, scheduled_for = now(),
            lease_expires_at = null, updated_at = now()
        where j.id = any (p_ids) and j.status = 'processing'
          and j.attempts = p_attempts[array_position(p_ids, j.id)]
        returning j.id, j.attempts + 1 as attempt, j.worker_id, j.started_at
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempt, c.worker_id, c.started_at, 'snoozed', 'released by a stopping worker'
        from changed c
    )
    select c.id from changed c;
end
$$;

-- fail_jobs gains p_max_attempts: a handler's own max_attempts overrides the job's.
drop function {{ s }}.fail_job(uuid, int, text, interval, boolean);
drop function {{ s }}.fail_jobs(uuid[], int[], text[], interval[], boolean[]);

create function {{ s }}.fail_jobs(
    p_ids uuid[], p_attempts int[], p_errors text[],
    p_retry_in interval[] default null, p_permanent boolean[] default null,
    p_max_attempts int[] default null
) returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
#variable_conflict use_column
begin
    return query
    with input as (
        select u.id, u.attempt, u.error, p_retry_in[u.ord] as retry_in,
               not coalesce(p_permanent[u.ord], false) as may_retry, p_max_attempts[u.ord] as max_attempts
        from unnest(p_ids, p_attempts, p_errors) with ordinality as u(id, attempt, error, ord)
    ), changed as (
        update {{ s }}.jobs j
        set status = case when i.may_retry and j.attempts < coalesce(i.max_attempts, j.max_attempts)
                          then 'pending' else 'failed' end,
            scheduled_for = case when i.may_retry and j.attempts < coalesce(i.max_attempts, j.max_attempts)
                then now() + greatest(coalesce(i.retry_in, {{ s }}.backoff(j.type, j.attempts)),
                                      interval '1 second')
                else j.scheduled_for end,
            completed_at = case when i.may_retry and j.attempts < coalesce(i.max_attempts, j.max_attempts)
                                then null else now() end,
            max_attempts = coalesce(i.max_attempts, j.max_attempts),
            last_error = i.error, lease_expires_at = null, updated_at = now()
        from input i
        where j.id = any (p_ids) and j.id = i.id and j.status = 'processing' and j.attempts = i.attempt
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at,
               case when c.status = 'pending' then 'retry' else 'failed' end, c.last_error
        from changed c
    )
    select c.id, c.status from changed c;
end
$$;

create function {{ s }}.fail_job(
    p_id uuid, p_attempt int, p_error text,
    p_retry_in interval default null, p_permanent boolean default false
) returns text
language sql volatile set search_path = '' as $$
    select f.status from {{ s }}.fail_jobs(array[p_id], array[p_attempt], array[p_error],
                                           array[p_retry_in], array[p_permanent]) f
$$;

-- Due jobs of a type (bounded), for a worker deciding whether to wait for rate-limit tokens.
create function {{ s }}.due_count(p_type text, p_cap int default 1000) returns int
language sql stable set search_path = '' as $$
    select count(*)::int from (
        select 1 from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit p_cap
    ) due
$$;

alter table {{ s }}.rate_limits enable row level security;
revoke all on all tables in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
