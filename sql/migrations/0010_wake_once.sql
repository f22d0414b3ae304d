-- jobkit 0010: a wake-up is accepted once per fleet, and wake-ups coalesce across transactions.
--
-- Accepted once: the worker consumes each signed wake-up's signature here (consume_wake), so a
-- request read from pg_net's queue (readable by every role) is accepted by one worker process of
-- the fleet, once, also across restarts; a repeat is answered as a harmless duplicate.
-- Coalesced: a burst of single-row enqueue transactions sent one pg_net request each (pg_net sends
-- about 200 a second, shared with the application's own requests). Now none is sent while a worker
-- drains or lingers on the type (wake_draining / wake_idle), and at most one a second otherwise.
-- New tables and functions only, and _wake_for replaced: no lock on jobs.
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.

-- Signed wake-ups accepted, by signature, until their window has surely ended (0010). The primary
-- key makes acceptance once per fleet: every worker process consumes here (consume_wake).
create table {{ s }}.wake_nonces (
    nonce      text primary key,
    expires_at timestamptz not null
);
create index wake_nonces_expires_idx on {{ s }}.wake_nonces (expires_at);

-- Per type, what workers say about it (0010): draining until (refreshed while a drain runs) and
-- when a worker last went idle on it. Written by workers only, so an enqueue never waits for them.
create table {{ s }}.wake_drains (
    type           text primary key,
    draining_until timestamptz,
    idle_at        timestamptz
);

-- Per type, when an enqueue last sent a due-now wake-up (0010). Written by enqueues only, under a
-- try-lock, so no enqueue ever waits for another.
create table {{ s }}.wake_sent (
    type    text primary key,
    sent_at timestamptz not null
);

alter table {{ s }}.wake_nonces enable row level security;
alter table {{ s }}.wake_drains enable row level security;
alter table {{ s }}.wake_sent enable row level security;
