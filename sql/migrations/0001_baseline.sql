-- jobkit 0001, the baseline: the tables of jobkit 0.1 (the migrations written before it were
-- squashed into this one before the first release). Recut by issue 22: its functions, views,
-- triggers and grants moved to sql/functions/, which every deploy applies after the migrations.
-- Do not edit otherwise. The current tables, readable, are sql/schema/tables.sql (the job states
-- are explained there); later changes come as new migrations and as edits there
-- (tests/integration/test_schema_drift.py compares the two).

-- ================================================================================================
-- 1. Tables
-- ================================================================================================

create table {{ s }}.jobs (
    id                   uuid primary key default gen_random_uuid(),
    type                 text not null,
    payload              jsonb not null,
    status               text not null default 'pending'
                         check (status in ('pending', 'processing', 'completed', 'failed', 'dead', 'cancelled')),
    priority             int not null default 0,
    attempts             int not null default 0 check (attempts >= 0),
    max_attempts         int check (max_attempts >= 1),  -- as enqueued; null: decided when it runs
    handler_max_attempts int check (handler_max_attempts >= 1),  -- the claiming handler's own
    round_start          int not null default 0 check (round_start >= 0),  -- attempts before retry_job
    last_error           text,
    result               jsonb,
    scheduled_for        timestamptz not null default now(),  -- when it is (or becomes) due
    started_at           timestamptz,
    completed_at         timestamptz,
    created_at           timestamptz not null default now(),
    lease_expires_at     timestamptz,
    worker_id            text,
    idempotency_key      text,
    updated_at           timestamptz not null default now(),
    constraint jobs_type_not_empty check (type <> ''),
    constraint jobs_lease_when_processing check (status <> 'processing' or lease_expires_at is not null)
) with (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

-- Claims walk runnable rows in (priority desc, scheduled_for) order. A retry waiting in the future
-- sorts after every job of its priority that is due now, so the claim's index scan meets runnable
-- rows first and stops at LIMIT however many retries are parked in the future. The same index
-- answers "is there due work of this type?" and the skip scans of pending_types() and next_due().
create index jobs_claim_idx on {{ s }}.jobs (type, priority desc, scheduled_for) where status = 'pending';
-- The stuck sweep reads only expired leases. The predicate is on the lease, not on the status, so
-- that fenced completions (status = 'processing') probe the primary key instead of this index.
create index jobs_lease_idx on {{ s }}.jobs (lease_expires_at) where lease_expires_at is not null;
-- The dead sweep and prune read only finished rows, oldest first.
create index jobs_failed_idx on {{ s }}.jobs (completed_at) where status = 'failed';
create index jobs_finished_idx on {{ s }}.jobs (completed_at) where status in ('completed', 'dead', 'cancelled');
-- One unfinished job per (type, idempotency key).
create unique index jobs_idempotency_idx on {{ s }}.jobs (type, idempotency_key)
    where idempotency_key is not null and status in ('pending', 'processing');

-- The attempts that did not complete their job (retries, failures, snoozes, releases, expired
-- leases, cancellations): no failure disappears when the next attempt overwrites last_error. The
-- completing attempt lives on the job row only (a successful job costs no second write); the view
-- job_history shows both.
create table {{ s }}.job_attempts (
    id          bigint generated always as identity primary key,
    job_id      uuid not null,
    attempt     int not null,
    worker_id   text,
    started_at  timestamptz,
    finished_at timestamptz not null default now(),
    outcome     text not null
                check (outcome in ('completed', 'retry', 'failed', 'snoozed', 'lease_expired', 'cancelled')),
    error       text,
    duration    interval generated always as (finished_at - started_at) stored
) with (autovacuum_vacuum_insert_scale_factor = 0.02);
create index job_attempts_job_idx on {{ s }}.job_attempts (job_id, attempt);

-- Per-type settings, synced from jobkit.toml by `jobkit deploy`. The row '*' holds the defaults.
create table {{ s }}.job_types (
    type           text primary key,
    max_attempts   int not null check (max_attempts between 1 and 1000),
    lease          interval not null check (lease >= interval '5 seconds'),
    backoff_base   interval not null check (backoff_base >= interval '1 second'),
    backoff_factor float8 not null check (backoff_factor between 1 and 100),
    backoff_cap    interval not null check (backoff_cap >= backoff_base),
    backoff_jitter float8 not null check (backoff_jitter >= 0 and backoff_jitter < 1),
    wake_on_insert boolean not null default true,  -- false: only the cron wake-up wakes this type
    rate_limit     text  -- the rate-limit key this type's claims take tokens from
);
insert into {{ s }}.job_types (type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap, backoff_jitter)
values ('*', 3, '5 minutes', '30 seconds', 4, '1 hour', 0.1);

-- One token bucket per key: `rate` tokens per second up to `burst`. The row lock serialises
-- takers, so any number of worker processes together stay under the limit.
create table {{ s }}.rate_limits (
    key        text primary key check (key ~ '^[A-Za-z0-9_.:\-]{1,100}$'),
    rate       float8 not null check (rate > 0),
    burst      int not null check (burst >= 1),
    tokens     float8 not null,
    updated_at timestamptz not null default clock_timestamp()
);

-- Runtime settings, synced from jobkit.toml by `jobkit deploy` (values are jsonb).
create table {{ s }}.settings (
    key        text primary key,
    value      jsonb not null,
    updated_at timestamptz not null default now()
);
insert into {{ s }}.settings (key, value) values
    ('transport', '"notify"'),         -- 'pg_net' or 'notify'; deploy resolves 'auto'
    ('wake_timeout_ms', '5000'),       -- pg_net timeout_milliseconds, always passed explicitly
    ('max_fanout', '4'),               -- most worker calls one wake-up may start
    ('batch_size', '100'),             -- due jobs per worker call when fanning out
    ('budget_ms', '25000'),            -- time budget of one drain
    ('channel', {{ (schema ~ "_wake") | tojson | literal }}),
    ('secret_previous_until', 'null'); -- a rotated-out signing secret is accepted until then

-- The worker URL and signing secret when Supabase Vault is absent. Only the owner and service_role
-- can read it; Vault is used instead whenever vault.decrypted_secrets exists.
create table {{ s }}.secrets (
    name       text primary key,
    value      text not null,
    updated_at timestamptz not null default now()
);

-- One row per wake-up sent over pg_net. pg_net answers asynchronously and keeps responses 6 hours
-- only, so reconcile_wakeups() copies each outcome here: delivered (2xx), failed (other status or a
-- connection error), timed_out (outcome unknown: pg_net timeouts can still deliver), unanswered
-- (no response long after the timeout). NOTIFY wake-ups have no answer and are not recorded.
create table {{ s }}.wakeups (
    id          bigint generated always as identity primary key,
    type        text not null,
    transport   text not null check (transport in ('pg_net', 'notify')),
    request_id  bigint,
    created_at  timestamptz not null default now(),
    outcome     text check (outcome in ('delivered', 'failed', 'timed_out', 'unanswered', 'notified')),
    status_code int,
    error       text,
    checked_at  timestamptz
);
create index wakeups_open_idx on {{ s }}.wakeups (request_id) where outcome is null;
create index wakeups_created_idx on {{ s }}.wakeups (created_at);

-- Which of jobkit's cron jobs `jobkit deploy` manages (origin config: declared in jobkit.toml or
-- built in) and which an operator added with `jobkit schedule add` (origin cli, left alone by sync).
create table {{ s }}.schedules (
    name       text primary key,
    origin     text not null check (origin in ('config', 'cli')),
    updated_at timestamptz not null default now()
);

-- ================================================================================================
-- 10. Security: nothing for PUBLIC, anon or authenticated; what jobkit's API needs for service_role
-- ================================================================================================
alter table {{ s }}.jobs enable row level security;
alter table {{ s }}.job_attempts enable row level security;
alter table {{ s }}.job_types enable row level security;
alter table {{ s }}.rate_limits enable row level security;
alter table {{ s }}.settings enable row level security;
alter table {{ s }}.secrets enable row level security;
alter table {{ s }}.wakeups enable row level security;
alter table {{ s }}.schedules enable row level security;
