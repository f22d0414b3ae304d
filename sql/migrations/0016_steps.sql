-- jobkit 0016: durable steps (issue 25, item 1). ctx.step stores each completed step's result, one
-- row per (job, step name, occurrence): the n-th call of that name within one execution of the
-- handler. A retry reads them back (load_steps) and does not run a completed step again. A step
-- that raised is kept as 'failed' with its error (for debugging) and runs again on the next
-- attempt; a completed row is never overwritten. Rows are written fenced by the attempt
-- (save_step: the job must be processing under that attempt). A new table: no job pays for it
-- unless its handler calls ctx.step. No foreign key (like job_attempts): prune and delete remove a
-- job's steps with it, so deleting jobs costs no per-row trigger.
-- occurrence, attempt and tries are int like jobs.attempts (small counters, never near 2^31).
-- squawk-ignore-file require-lock-timeout, require-statement-timeout, prefer-bigint-over-int
create table if not exists {{ s }}.job_steps (
    job_id      uuid not null,
    name        text not null check (pg_catalog.char_length(name) between 1 and 200),
    occurrence  int not null check (occurrence >= 1),
    attempt     int not null,  -- the attempt that wrote the row
    status      text not null check (status in ('completed', 'failed')),
    result      jsonb,
    error       text,
    tries       int not null default 1 check (tries >= 1),  -- in-process tries (retries=) it took
    started_at  timestamptz not null,
    finished_at timestamptz not null default now(),
    primary key (job_id, name, occurrence)
);
alter table {{ s }}.job_steps enable row level security;
