-- jobkit 0005: fairness and control. Concurrency keys with per-key and per-type running limits
-- enforced at claim time, round-robin claims across keys, pausing a type or a type's key,
-- telling a worker that its running job was cancelled, debounce and throttle at enqueue.
-- Its two indexes on jobs are built CONCURRENTLY after its transaction (at the end of the file).
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.

-- ---- 1. Columns, tables, indexes ----------------------------------------------------------------

alter table {{ s }}.jobs add column concurrency_key text;
alter table {{ s }}.jobs add constraint jobs_concurrency_key_length
    check (pg_catalog.length(concurrency_key) <= 1000) not valid;  -- validated by deploy

alter table {{ s }}.job_types add column fair boolean not null default false;
alter table {{ s }}.job_types add column key_template jsonb;
alter table {{ s }}.job_types add column max_running_per_key int check (max_running_per_key >= 1);
alter table {{ s }}.job_types add column max_running int check (max_running >= 1);
alter table {{ s }}.job_types add constraint job_types_limits_need_fair
    check (fair or (key_template is null and max_running_per_key is null and max_running is null)) not valid;  -- validated by deploy

create table {{ s }}.key_cursors (
    type       text primary key,
    last_key   text not null,
    updated_at timestamptz not null default now()
) with (fillfactor = 50);

create table {{ s }}.pauses (
    type      text not null,
    key       text,
    paused_at timestamptz not null default now(),
    constraint pauses_type_key unique nulls not distinct (type, key)
);

create table {{ s }}.enqueue_windows (
    type   text not null,
    kind   text not null check (kind in ('debounce', 'throttle')),
    key    text not null,
    job_id uuid,
    until  timestamptz,
    primary key (type, kind, key)
);

-- ---- 8. Security ---------------------------------------------------------------------------------
alter table {{ s }}.key_cursors enable row level security;
alter table {{ s }}.pauses enable row level security;
alter table {{ s }}.enqueue_windows enable row level security;

-- jobkit:outside-transaction
create index concurrently if not exists jobs_key_claim_idx
    on {{ s }}.jobs (type, concurrency_key, priority desc, scheduled_for)
    where status = 'pending' and concurrency_key is not null;
create index concurrently if not exists jobs_key_running_idx on {{ s }}.jobs (type, concurrency_key)
    where status = 'processing' and concurrency_key is not null;
