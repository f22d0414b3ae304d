-- jobkit 0003: what the dashboard (`jobkit dashboard`) reads and writes. Indexes that keep its
-- pages fast at millions of jobs, the audit table of operator actions, and bulk forms of the
-- operator actions that run in bounded batches.

-- The jobs page lists newest first with keyset pagination on (created_at, id), and filters by a
-- time range on created_at.
create index jobs_created_idx on {{ s }}.jobs (created_at, id);
-- Dead jobs per type for the overview, without walking every finished job (0003). Partial: only
-- dead rows are in it, so the hot path (claims, completions) never writes to it.
create index jobs_dead_idx on {{ s }}.jobs (type) where status = 'dead';
-- The finished jobs' index carries status and type, so the throughput charts (completions per
-- minute over an hour or a day, for all types or one) are index-only scans. Prune reads it as before.
drop index {{ s }}.jobs_finished_idx;
create index jobs_finished_idx on {{ s }}.jobs (completed_at) include (status, type)
    where status in ('completed', 'dead', 'cancelled');
-- The overview's failure-rate chart and duration percentiles read attempts by time.
create index job_attempts_finished_idx on {{ s }}.job_attempts (finished_at);

-- Every operator action taken from the dashboard: who, when, on what (ids or a filter), how many
-- matched when it was confirmed, and how many it changed. Written before the action starts and
-- updated after each batch, so an interrupted action shows how far it got.
create table {{ s }}.audit_log (
    id          bigint generated always as identity primary key,
    at          timestamptz not null default now(),
    actor       text not null,
    action      text not null check (action in ('retry', 'cancel', 'delete', 'pause_schedule', 'resume_schedule',
                                             'pause_type', 'resume_type')),
    target      jsonb not null,  -- {"ids": [...]}, {"filter": {...}}, {"schedule": "name"} or {"type", "key"}
    matched     bigint,          -- the count the operator confirmed
    affected    bigint not null default 0,  -- rows the action changed so far
    finished_at timestamptz,
    error       text
);
create index audit_log_at_idx on {{ s }}.audit_log (at);
alter table {{ s }}.audit_log enable row level security;
revoke all on {{ s }}.audit_log from public;

-- Retry many jobs (retry_job for each): returns how many went back to pending. A job whose
-- idempotency key a newer unfinished job now holds stays where it is, and the rest still retry.
create function {{ s }}.retry_jobs(p_ids uuid[]) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
    v_retried int := 0;
begin
    foreach v_id in array coalesce(p_ids, '{}') loop
        begin
            if {{ s }}.retry_job(v_id) then
                v_retried := v_retried + 1;
            end if;
        exception when unique_violation then
            null;  -- the key belongs to a newer unfinished job: this one stays as it is
        end;
    end loop;
    return v_retried;
end
$$;

-- Cancel many jobs (cancel_job for each): returns how many were cancelled.
create function {{ s }}.cancel_jobs(p_ids uuid[]) returns int
language sql volatile set search_path = '' as $$
    select count(*) filter (where {{ s }}.cancel_job(i))::int from unnest(p_ids) as i
$$;

-- Delete many jobs with their attempt history: returns how many. A processing job is left alone
-- (cancel it first: its worker still holds it).
create function {{ s }}.delete_jobs(p_ids uuid[]) returns int
language sql volatile set search_path = '' as $$
    with gone as (
        delete from {{ s }}.jobs j where j.id = any(p_ids) and j.status <> 'processing' returning j.id
    ), history as (
        delete from {{ s }}.job_attempts a using gone g where a.job_id = g.id
    )
    select count(*)::int from gone
$$;

revoke all on function {{ s }}.retry_jobs(uuid[]) from public;
revoke all on function {{ s }}.cancel_jobs(uuid[]) from public;
revoke all on function {{ s }}.delete_jobs(uuid[]) from public;
{% include "grants.sql" %}
