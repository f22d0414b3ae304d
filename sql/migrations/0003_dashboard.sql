-- jobkit 0003: what the dashboard (`jobkit dashboard`) reads and writes. Indexes that keep its
-- pages fast at millions of jobs, the audit table of operator actions, and bulk forms of the
-- operator actions that run in bounded batches.
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.

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

-- jobkit:outside-transaction
-- Built CONCURRENTLY after the transaction above, so enqueues, claims and completions go on while
-- they build (each was a stall of up to 1.8 s on a million jobs: docs/BENCHMARKS.md, "Live upgrade").
-- The jobs page lists newest first with keyset pagination on (created_at, id), and filters by a
-- time range on created_at.
create index concurrently if not exists jobs_created_idx on {{ s }}.jobs (created_at, id);
-- Dead jobs per type for the overview, without walking every finished job. Partial: only dead rows
-- are in it, so the hot path (claims, completions) never writes to it.
create index concurrently if not exists jobs_dead_idx on {{ s }}.jobs (type) where status = 'dead';
-- The finished jobs' index carries status and type, so the throughput charts (completions per
-- minute over an hour or a day, for all types or one) are index-only scans. Prune reads it as before.
drop index concurrently if exists {{ s }}.jobs_finished_idx;
create index concurrently if not exists jobs_finished_idx on {{ s }}.jobs (completed_at) include (status, type)
    where status in ('completed', 'dead', 'cancelled');
-- The overview's failure-rate chart and duration percentiles read attempts by time.
create index concurrently if not exists job_attempts_finished_idx on {{ s }}.job_attempts (finished_at);
