-- jobkit 0021: live workers (issue 27). Each worker process registers when it starts and writes a
-- heartbeat every few seconds (worker_beat, one small upsert of its own row, off the claim and
-- completion paths); a clean shutdown marks its row gone (worker_gone); the stuck sweep marks gone
-- the workers that missed their heartbeats and deletes rows gone for an hour (sweep_workers). The
-- id is the worker id claims write into jobs.worker_id, so a worker's running jobs are found
-- through jobs_lease_idx (the leased rows), with no new index on jobs.
-- A new, empty table: nothing waits on it. Its int columns hold a pid, a concurrency and a count of
-- running jobs (one row per worker process), never ids: int is their size.
-- squawk-ignore-file require-lock-timeout, require-statement-timeout, prefer-bigint-over-int
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

alter table {{ s }}.workers enable row level security;
