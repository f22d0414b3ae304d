-- jobkit 0012: the job types workers serve are recorded, and a job's time stays inside the year 9999.
--
-- known_types: a worker records the types it has handlers for when it starts (record_types, one
-- statement per start, nothing on the claim or enqueue paths), and `jobkit enqueue --new-type`
-- the type it introduces. With jobkit.toml's types and the types of existing jobs, these are the
-- types the CLI knows: it refuses any other (a typo) with a "did you mean".
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.
create table {{ s }}.known_types (
    type    text primary key check (pg_catalog.char_length(type) between 1 and 100),
    seen_at timestamptz not null default now()  -- the last start of a worker serving it
);

-- A job's scheduled_for is before 9999-12-31 UTC. enqueue took any timestamptz as run_at (up to
-- the year 294276), and `jobkit jobs show` then failed on the job: Python's datetime ends with the
-- year 9999 (and a time in the last day of it is already the year 10000 east of UTC). Rows that
-- have such a time are repaired first, as 0002 did for infinity: a pending one could never run
-- and is cancelled with a note; any other keeps its created_at.
update {{ s }}.jobs
set status = 'cancelled', scheduled_for = created_at, completed_at = pg_catalog.now(),
    updated_at = pg_catalog.now(),
    last_error = 'cancelled by jobkit migration 0012: run_at was after the year 9999, so it would never run'
where scheduled_for >= '9999-12-31 00:00:00+00'::timestamptz and status = 'pending';

update {{ s }}.jobs set scheduled_for = created_at, updated_at = pg_catalog.now()
where scheduled_for >= '9999-12-31 00:00:00+00'::timestamptz;

alter table {{ s }}.jobs add constraint jobs_scheduled_for_year_9999
    check (scheduled_for < '9999-12-31 00:00:00+00'::timestamptz) not valid;
-- validated by deploy after the migrations, in a transaction of its own (jobs stay writable)

alter table {{ s }}.known_types enable row level security;
