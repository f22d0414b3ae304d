-- jobkit's tables, as they are now: sql/schema/ holds the tables, their indexes, constraints,
-- seed rows and row level security; sql/functions/ holds everything that can be re-applied (the
-- functions, views, triggers and grants). Together they are the current schema.
--
-- How a database gets there: `jobkit deploy` applies the pending versioned migrations
-- (sql/migrations/, only what cannot be re-applied: tables, columns, indexes, constraints, data
-- moves), each in its own transaction, then every file of sql/functions/ in file-name order in one
-- transaction, on every deploy. tests/integration/test_schema_drift.py builds one database from the
-- migrations plus sql/functions/ and another from this folder plus sql/functions/, and fails on
-- any difference between the two catalogs. A change to a table is a new migration and an edit here.
--
-- Rendered per installation: {{ s }} is jobkit's schema (quoted), {{ schema }} its name.
--
-- Job states (who moves a job, and when):
--   pending     waiting to run; runnable once scheduled_for <= now(). enqueue, a retry, a snooze,
--               the stuck sweep, a release and retry_job put a job here.
--   processing  claimed by claim_jobs: attempts was incremented, a lease runs until
--               lease_expires_at. Only the claiming attempt may finish it (complete/fail/snooze/
--               extend are fenced on attempts, the fencing token).
--   completed   complete_jobs stored the result. Terminal; pruned after the retention.
--   failed      out of attempts in its round (or a permanent error); sweep_dead moves it on.
--   dead        dead-lettered for manual review; retry_job revives it. Pruned after the retention.
--   cancelled   cancel_job stopped it; a running attempt's worker is told on its heartbeat (running_check)
--               and its late completion is refused.
--
-- The attempt limit of a job is the first of: its own max_attempts as enqueued, the max_attempts of
-- the handler that last claimed it (handler_max_attempts), its type's setting, the defaults row.
-- retry_job starts a fresh round: round_start records the attempts used before it.

create table {{ s }}.jobs (
    id                   uuid primary key default gen_random_uuid(),
    type                 text not null,
    payload              jsonb not null,
    status               text not null default 'pending'
                         -- waiting: a durable job's sleep or wait (0018); blocked: a graph's child
                         -- whose parents have not all finished (0018). Only 'pending' is claimed.
                         -- one array constant, not an ARRAY[] of eight: cheaper to enforce (0023)
                         constraint jobs_status_check check (status = any (
                             '{pending,processing,completed,failed,dead,cancelled,waiting,blocked}'::text[])),
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
    -- the producer's W3C trace context as its propagator wrote it ({"traceparent": ...,
    -- "tracestate": ...}); null when the enqueuer had no OpenTelemetry tracing configured.
    trace_context        jsonb,
    concurrency_key      text,  -- its key (given or from the type's template); '' = no key of its own
    -- what the handler last reported with ctx.progress() ({"fraction", "done", "total",
    -- "message", "data"}), written by set_progress at most a few times a second.
    progress             jsonb,
    owner                text,  -- the app user it belongs to, their JWT subject (the per-user API sets it)
    -- a job made by a declared row trigger ([triggers.<name>], 0015): {"trigger", "table", "op",
    -- "pk"}; null for every other job.
    source               jsonb,
    -- job graphs (jobkit.flow, 0020): the flow it belongs to (null: a plain job); a blocked child's
    -- parents that have not ended yet; whether a parent's children were told that it ended.
    flow_id              uuid,
    blocked_by           int,
    children_settled     boolean,
    constraint jobs_type_not_empty check (type <> ''),
    constraint jobs_lease_when_processing check (status <> 'processing' or lease_expires_at is not null),
    constraint jobs_scheduled_for_finite check (pg_catalog.isfinite(scheduled_for)),  -- no infinity
    -- Python's datetime (jobs show, the dashboard) ends with the year 9999, in every time zone
    constraint jobs_scheduled_for_year_9999 check (scheduled_for < '9999-12-31 00:00:00+00'::timestamptz),
    constraint jobs_trace_context_object
        check (trace_context operator(pg_catalog.@>) '{}'::jsonb),  -- objects only; null passes (0025)
    constraint jobs_concurrency_key_length check (pg_catalog.length(concurrency_key) <= 1000),
    constraint jobs_progress_object
        check (progress operator(pg_catalog.@>) '{}'::jsonb)  -- objects only; null passes (0025)
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
-- It carries status and type so that the dashboard's throughput charts are index-only scans.
create index jobs_finished_idx on {{ s }}.jobs (completed_at) include (status, type)
    where status in ('completed', 'dead', 'cancelled');
-- Fair types (job_types.fair) claim by key: their keys with pending jobs by a skip scan, each key's
-- due jobs in claim order, and each key's running count. Jobs without a key are in neither index.
-- No deduplication: jobs enqueued together share every column here, and an entry in a
-- posting list cannot be marked dead while any job in it is still pending, so every claim would
-- re-read the key's already-claimed jobs from the heap until VACUUM.
create index jobs_key_claim_idx on {{ s }}.jobs (type, concurrency_key, priority desc, scheduled_for)
    with (deduplicate_items = off) where status = 'pending' and concurrency_key is not null;
create index jobs_key_running_idx on {{ s }}.jobs (type, concurrency_key)
    with (deduplicate_items = off) where status = 'processing' and concurrency_key is not null;
-- One unfinished job per (type, idempotency key).
create unique index jobs_idempotency_idx on {{ s }}.jobs (type, idempotency_key)
    where idempotency_key is not null and status in ('pending', 'processing');
-- Dead, cancelled, waiting and blocked jobs by state and type (0025; five partial indexes before):
-- the dashboard's state bar and overview, the sweep's blocked jobs, the waits' overdue ones. Only
-- rows in those states are in it, so ordinary jobs never write to it.
create index jobs_state_idx on {{ s }}.jobs (status, type)
    where status operator(pg_catalog.=) any ('{dead,cancelled,waiting,blocked}');
-- A flow's jobs (0020), and its blocked or pending ones (0025); plain jobs are not in it.
create index jobs_flow_state_idx on {{ s }}.jobs (flow_id, status) where flow_id is not null;
-- The dashboard's jobs page lists newest first with keyset pagination on (created_at, id) and
-- filters by a time range on created_at. Its index (0003's jobs_created_idx) cost every insert (+20%
-- WAL a job), so it exists only when jobkit.toml asks for it ([dashboard] created_index = true, 0017):
-- deploy builds it CONCURRENTLY as jobs_created_page_idx, as the payload index below.
-- Payload search (the dashboard's payload @> filter) has a GIN index only when jobkit.toml asks for
-- it ([dashboard] payload_index = true): deploy builds it CONCURRENTLY outside this schema, since
-- it costs every enqueue, claim and completion (docs/BENCHMARKS.md).

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
                check (outcome in ('completed', 'retry', 'failed', 'snoozed', 'released', 'lease_expired',
                                   'cancelled', 'waited')),
    error       text,
    duration    interval generated always as (finished_at - started_at) stored
) with (autovacuum_vacuum_insert_scale_factor = 0.02);
create index job_attempts_job_idx on {{ s }}.job_attempts (job_id, attempt);
-- The overview's failure-rate chart and duration percentiles read attempts by time.
create index job_attempts_finished_idx on {{ s }}.job_attempts (finished_at);

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
    rate_limit     text,  -- the rate-limit key this type's claims take tokens from
    -- a fair type's claims serve its concurrency keys round-robin under these limits
    fair           boolean not null default false,
    key_template   jsonb,  -- the key of a job enqueued without one: ["tenant:", ["tenant_id"]]
    max_running_per_key int check (max_running_per_key >= 1),
    max_running    int check (max_running >= 1),
    constraint job_types_limits_need_fair
        check (fair or (key_template is null and max_running_per_key is null and max_running is null))
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

-- Signed wake-ups accepted, by signature, until their window has surely ended. The primary
-- key makes acceptance once per fleet: every worker process consumes here (consume_wake).
create table {{ s }}.wake_nonces (
    nonce      text primary key,
    expires_at timestamptz not null
);
create index wake_nonces_expires_idx on {{ s }}.wake_nonces (expires_at);

-- Per type, what workers say about it: draining until (refreshed while a drain runs) and
-- when a worker last went idle on it. Written by workers only, so an enqueue never waits for them.
create table {{ s }}.wake_drains (
    type           text primary key,
    draining_until timestamptz,
    idle_at        timestamptz
);

-- Per type, when an enqueue last sent a due-now wake-up. Written by enqueues only, under a
-- try-lock, so no enqueue ever waits for another.
create table {{ s }}.wake_sent (
    type    text primary key,
    sent_at timestamptz not null
);

-- Which of jobkit's cron jobs `jobkit deploy` manages (origin config: declared in jobkit.toml or
-- built in) and which an operator added with `jobkit schedule add` (origin cli, left alone by sync).
create table {{ s }}.schedules (
    name       text primary key,
    origin     text not null check (origin in ('config', 'cli')),
    updated_at timestamptz not null default now()
);

-- Every operator action taken from the dashboard: who, when, on what (ids or a filter), how many
-- matched when it was confirmed, and how many it changed. Written before the action starts and
-- updated after each batch, so an interrupted action shows how far it got.
create table {{ s }}.audit_log (
    id          bigint generated always as identity primary key,
    at          timestamptz not null default now(),
    actor       text not null,
    -- run_schedule: the dashboard's "run now" (0022); replay and the flow verbs: workflows (0020)
    action      text not null check (action in ('retry', 'cancel', 'delete', 'pause_schedule', 'resume_schedule',
                                             'pause_type', 'resume_type', 'replay', 'cancel_flow',
                                             'pause_flow', 'resume_flow', 'run_schedule')),
    target      jsonb not null,  -- {"ids": [...]}, {"filter": {...}}, {"schedule": "name"} or {"type", "key"}
    matched     bigint,          -- the count the operator confirmed
    affected    bigint not null default 0,  -- rows the action changed so far
    finished_at timestamptz,
    error       text,
    skipped     jsonb not null default '{}'::jsonb  -- jobs left alone so far, counted by reason
);
create index audit_log_at_idx on {{ s }}.audit_log (at);

-- where the previous claim of a fair type stopped, so the next one serves the next keys.
create table {{ s }}.key_cursors (
    type       text primary key,
    last_key   text not null,
    updated_at timestamptz not null default now(),
    keys       int  -- keys with due jobs the last claim found; sizes the next claim's probes
) with (fillfactor = 50);

-- paused types (key null) and paused keys of a type: not claimed; a paused type is not woken.
create table {{ s }}.pauses (
    type      text not null,
    key       text,
    paused_at timestamptz not null default now(),
    constraint pauses_type_key unique nulls not distinct (type, key)
);

-- debounce (the pending job a key's enqueues replace) and throttle (the job of a key's
-- current window) per (type, key); the row lock serialises concurrent enqueuers of one key.
create table {{ s }}.enqueue_windows (
    type   text not null,
    kind   text not null check (kind in ('debounce', 'throttle')),
    key    text not null,
    job_id uuid,
    until  timestamptz,
    primary key (type, kind, key)
);

-- the types workers serve, recorded when they start (record_types), and those `jobkit enqueue
-- --new-type` introduced: with jobkit.toml's and those of existing jobs, the types the CLI knows.
create table {{ s }}.known_types (
    type    text primary key check (pg_catalog.char_length(type) between 1 and 100),
    seen_at timestamptz not null default now()  -- the last start of a worker serving it
);

-- The row triggers deploy manages ([triggers.<name>] in jobkit.toml), one row per trigger and
-- operation: the sha256 of the SQL that made them and the md5 of their definitions afterwards,
-- so that deploy --check and doctor see one dropped, disabled or altered by hand.
create table {{ s }}.row_triggers (
    name          text not null,
    op            text not null check (op in ('insert', 'update', 'delete')),
    table_name    text not null,  -- schema.table as declared
    trigger_name  text not null,  -- on the table; prefixed with jobkit's schema
    function_name text not null,  -- in jobkit's schema
    spec          jsonb not null, -- the declaration: table, on, when, type, payload, idempotency
    checksum      text not null,  -- sha256 of the rendered SQL
    definition    text not null,  -- md5 of the trigger's and the function's definitions after deploy
    deployed_at   timestamptz not null default now(),
    primary key (name, op)
);

-- Durable steps (0016): the result of each completed ctx.step, one row per (job, step name,
-- occurrence), written fenced by the attempt; a step that raised is kept as 'failed' with its error
-- and runs again on the next attempt. No foreign key (like job_attempts): prune and delete remove a
-- job's steps with it.
-- The declared row triggers' inbox (0026): one narrow row per changed row, written by the trigger in
-- the changing transaction (a heap insert, no index), made into jobs off it by move_row_inbox (the
-- claim of the type, the stuck sweep). It holds only what has not been moved yet.
create table {{ s }}.row_inbox (
    name      text not null,  -- the declared trigger ([triggers.<name>])
    op        text not null,  -- its operation: insert, update or delete
    type      text not null,  -- the job type it makes
    staged    json not null,  -- the declared payload's and the primary key's columns, [value, ...] (sql/row_trigger.sql)
                              -- (json: cheaper to build per row than jsonb; the move takes them apart)
    staged_at timestamptz not null default now()  -- the changing transaction's start: the job's created_at
) with (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000);

create table {{ s }}.job_steps (
    job_id      uuid not null,
    name        text not null,  -- 1 to 200 characters (save_steps checks it; no CHECK since 0024)
    occurrence  int not null,  -- >= 1 (save_steps checks it)
    attempt     int not null,  -- the attempt that wrote the row
    status      text not null,  -- 'completed' or 'failed'
    result      jsonb,
    error       text,
    tries       int not null default 1,  -- in-process tries (retries=) it took, >= 1
    started_at  timestamptz not null,
    finished_at timestamptz not null default now(),
    kind        text not null default 'step',  -- 'wait': a sleep's or a wait's outcome (0019)
    primary key (job_id, name, occurrence)
);

-- Open waits (0019): a waiting job's one wait (ctx.sleep, wait_for_event, wait_any, wait_for_jobs).
-- Resolving it deletes the row, records its outcome as a job_steps row of kind 'wait' and makes
-- the job pending (sql/functions/47_waits.sql).
create table {{ s }}.job_waits (
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
create index job_waits_due_idx on {{ s }}.job_waits (type, due) where due is not null;
create index job_waits_events_idx on {{ s }}.job_waits using gin (events);
create index job_waits_jobs_idx on {{ s }}.job_waits using gin (job_ids);

-- Events (jobkit.emit, 0019): one row per emit, a generation of its name and key, kept until
-- expires_at. A wait registered after an emit still sees it (latch).
create table {{ s }}.events (
    id          bigint generated always as identity primary key,
    name        text not null check (pg_catalog.char_length(name) between 1 and 200),
    key         text not null default '' check (pg_catalog.char_length(key) <= 1000),
    generation  int not null check (generation >= 1),  -- the n-th event of this name and key
    data        jsonb,
    dedupe      text,  -- emit(id => ...): an emit retried with the same id is the same event
    emitted_at  timestamptz not null default now(),
    expires_at  timestamptz not null
);
create index events_lookup_idx on {{ s }}.events (name, key, emitted_at);
create unique index events_dedupe_idx on {{ s }}.events (name, key, dedupe) where dedupe is not null;
create index events_expires_idx on {{ s }}.events (expires_at);

-- [events."<name>"] of jobkit.toml (0019), written by deploy: subscriber types and retention.
create table {{ s }}.event_config (
    name        text primary key,
    types       text[] not null default '{}',  -- subscribers: one job of each per event
    retention   interval  -- how long its events are kept (null: 7 days)
);

-- The jobs someone waits on (jobkit.wait registers them with wait_on, 0014): a finishing statement
-- sends the completion NOTIFY only for these, and deletes their rows; prune deletes expired ones.
create table {{ s }}.waiters (
    job_id     uuid primary key,
    expires_at timestamptz not null
);

-- Live workers (0021): each worker process upserts its row every few seconds (worker_beat, off the
-- claim and completion paths); a clean shutdown marks it gone (worker_gone), the stuck sweep marks
-- gone those that missed their heartbeats and deletes rows gone for an hour (sweep_workers). id is
-- the worker id claims write into jobs.worker_id. fillfactor 50: each heartbeat is a HOT update.
create table {{ s }}.workers (
    id          text primary key check (pg_catalog.char_length(id) between 1 and 200),
    host        text not null,
    pid         int not null,
    version     text not null,
    transport   text not null,  -- how it is woken: 'pg_net' (HTTP /run) or 'notify' (LISTEN)
    concurrency int not null check (concurrency >= 1),
    types       text[] not null default '{}',  -- the job types it serves
    running     int not null default 0 check (running >= 0),  -- jobs it held at its last heartbeat
    heartbeat   interval not null check (heartbeat > interval '0'),  -- how often it beats
    started_at  timestamptz not null,
    last_seen   timestamptz not null default now(),
    gone_at     timestamptz,  -- null while it runs; set by its clean shutdown or by the sweep
    gone_reason text check (gone_reason in ('stopped', 'missed heartbeats'))
) with (fillfactor = 50);

-- Job graphs (jobkit.flow, 0020): a flow, and its edges parent -> child with the child's policy when
-- the parent fails or is cancelled (fail: the child fails; cancel: it is cancelled; run: it runs
-- once its other parents ended). No foreign keys: delete and prune remove a job's edges with it.
create table {{ s }}.flows (
    id         uuid primary key,
    name       text check (pg_catalog.char_length(name) between 1 and 200),
    created_at timestamptz not null default now(),
    paused_at  timestamptz,  -- pause_flow: its ready jobs stay blocked until resume_flow
    owner      text,
    fan_in     uuid  -- a gather's callback: after every job of the flow created before it, no edge rows (0024)
);

create table {{ s }}.job_edges (
    parent_id         uuid not null,
    child_id          uuid not null,
    on_parent_failure text not null default 'fail' check (on_parent_failure in ('fail', 'cancel', 'run')),
    primary key (parent_id, child_id),
    constraint job_edges_not_self check (parent_id <> child_id)
);
create index job_edges_child_idx on {{ s }}.job_edges (child_id);

alter table {{ s }}.jobs enable row level security;
alter table {{ s }}.job_attempts enable row level security;
alter table {{ s }}.job_types enable row level security;
alter table {{ s }}.rate_limits enable row level security;
alter table {{ s }}.settings enable row level security;
alter table {{ s }}.secrets enable row level security;
alter table {{ s }}.wakeups enable row level security;
alter table {{ s }}.schedules enable row level security;
alter table {{ s }}.audit_log enable row level security;
alter table {{ s }}.key_cursors enable row level security;
alter table {{ s }}.pauses enable row level security;
alter table {{ s }}.enqueue_windows enable row level security;
alter table {{ s }}.known_types enable row level security;
alter table {{ s }}.wake_nonces enable row level security;
alter table {{ s }}.wake_drains enable row level security;
alter table {{ s }}.wake_sent enable row level security;
alter table {{ s }}.row_triggers enable row level security;
alter table {{ s }}.row_inbox enable row level security;
alter table {{ s }}.job_steps enable row level security;
alter table {{ s }}.waiters enable row level security;
alter table {{ s }}.job_waits enable row level security;
alter table {{ s }}.events enable row level security;
alter table {{ s }}.event_config enable row level security;
alter table {{ s }}.workers enable row level security;
alter table {{ s }}.flows enable row level security;
alter table {{ s }}.job_edges enable row level security;
