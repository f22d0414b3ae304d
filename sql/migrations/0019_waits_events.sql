-- jobkit 0019: sleeps, waits and events (issue 25, items 2 and 3). A durable job's handler that
-- calls ctx.sleep / ctx.wait_for_event / ctx.wait_any / ctx.wait_for_jobs ends its attempt without
-- consuming it; the job goes 'waiting' (0018) and its open wait is one row of job_waits (at most one
-- per job: the handler waits on one thing at a time). When the wait is resolved (its event emitted,
-- its jobs finished, its due time passed) the row is deleted, its outcome is recorded as a step of
-- kind 'wait' in job_steps (so the replaying handler returns it like a completed step) and the job is
-- pending again. events holds what jobkit.emit() stored: one row per emit (a generation of its
-- name and key), kept until expires_at (retention). event_config is what jobkit.toml's
-- [events."<name>"] tables say: the subscriber job types and the retention. New tables and a column
-- with a constant default: nothing is rewritten, no job pays for them unless it waits.
-- squawk-ignore-file require-lock-timeout, require-statement-timeout, prefer-bigint-over-int, prefer-text-field
create table if not exists {{ s }}.job_waits (
    job_id      uuid primary key,
    type        text not null,  -- the job's type: the claim of a type resolves its due waits
    step        text not null,  -- the wait's step name and occurrence (its job_steps row once resolved)
    occurrence  int not null check (occurrence >= 1),
    attempt     int not null,  -- the attempt that waited
    kind        text not null check (kind in ('sleep', 'event', 'jobs')),
    events      text[],  -- event waits: name || chr(31) || key of each event it waits for (any one)
    job_ids     uuid[],  -- jobs waits: the jobs it waits for (all of them)
    due         timestamptz,  -- a sleep's end, a wait's timeout; null: none
    created_at  timestamptz not null default now()
);
create index if not exists job_waits_due_idx on {{ s }}.job_waits (type, due) where due is not null;
create index if not exists job_waits_events_idx on {{ s }}.job_waits using gin (events);
create index if not exists job_waits_jobs_idx on {{ s }}.job_waits using gin (job_ids);
alter table {{ s }}.job_waits enable row level security;

create table if not exists {{ s }}.events (
    id          bigint generated always as identity primary key,
    name        text not null check (pg_catalog.char_length(name) between 1 and 200),
    key         text not null default '' check (pg_catalog.char_length(key) <= 1000),
    generation  int not null check (generation >= 1),  -- the n-th event of this name and key
    data        jsonb,
    dedupe      text,  -- emit(id => ...): an emit retried with the same id is the same event
    emitted_at  timestamptz not null default now(),
    expires_at  timestamptz not null
);
create index if not exists events_lookup_idx on {{ s }}.events (name, key, emitted_at);
create unique index if not exists events_dedupe_idx on {{ s }}.events (name, key, dedupe) where dedupe is not null;
create index if not exists events_expires_idx on {{ s }}.events (expires_at);
alter table {{ s }}.events enable row level security;

create table if not exists {{ s }}.event_config (
    name        text primary key,
    types       text[] not null default '{}',  -- subscribers: one job of each per event
    retention   interval  -- how long its events are kept (null: 7 days)
);
alter table {{ s }}.event_config enable row level security;

-- A wait's outcome is a step of its own kind (steps are 'step').
alter table {{ s }}.job_steps add column if not exists kind text not null default 'step';
-- An attempt that ended in a wait is recorded as 'waited' (not consumed, like a snooze). The check
-- is swapped live-safely: NOT VALID here, validated by deploy afterwards.
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.job_attempts drop constraint job_attempts_outcome_check;
alter table {{ s }}.job_attempts add constraint job_attempts_outcome_check
    check (outcome in ('completed', 'retry', 'failed', 'snoozed', 'released', 'lease_expired', 'cancelled',
                       'waited'))
    not valid;
