-- The job lifecycle, one query per step; each calls jobkit's SQL API (sql/functions/).

-- name: enqueue
-- run_at wins; else now() + delay (the database's clock, not the client's); else now(). The trace
-- context is null unless the enqueuer traces (OpenTelemetry configured).
select {{ s }}.enqueue(%(type)s, %(payload)s, %(priority)s,
                       coalesce(%(run_at)s::pg_catalog.timestamptz,
                                pg_catalog.now() operator(pg_catalog.+) coalesce(%(delay)s::interval, '0')),
                       %(max_attempts)s, %(idempotency_key)s, %(trace_context)s::pg_catalog.jsonb,
                       %(concurrency_key)s, %(debounce)s::interval, %(throttle)s::interval) as id

-- name: enqueue_plain
-- A job with nothing but a type, a payload and a priority (issue 23): a fixed shape with three
-- parameters, prepared once per connection, and none of the casts and coalesces of the full form.
select {{ s }}.enqueue(%(type)s, %(payload)s, %(priority)s) as id

-- name: enqueue_many
-- Types and payloads travel as JSON documents (the types as one string when they are all the same);
-- run_at wins over now() + delay, element by element. Ids come back in input order; the client
-- draws them (one os.urandom, a binary uuid[]: issue 23), the server only for a keyed batch.
select e.id from {{ s }}.enqueue_json(
    %(types)s::pg_catalog.jsonb, %(payloads)s::pg_catalog.jsonb, %(priorities)s,
    (select pg_catalog.array_agg(
                coalesce(u.r, pg_catalog.now() operator(pg_catalog.+) coalesce(u.d, '0')) order by u.o)
     from rows from (pg_catalog.unnest(%(run_ats)s::pg_catalog.timestamptz[]),
                     pg_catalog.unnest(%(delays)s::interval[])) with ordinality as u(r, d, o)),
    %(max_attempts)s, %(idempotency_keys)s, %(trace_context)s::pg_catalog.jsonb,
        %(concurrency_keys)s, %(ids)s::pg_catalog.uuid[]) as e(id)

-- name: complete
-- ids and attempts arrive as array literals, the results as one JSON array (see complete_params).
select * from {{ s }}.complete_jobs(
    %(ids)s::pg_catalog.uuid[], %(attempts)s::int[],
    (select pg_catalog.array_agg(e.v order by e.n)
     from pg_catalog.jsonb_array_elements(%(results)s::pg_catalog.jsonb) with ordinality as e(v, n))
) as id

-- name: fail
select id, status from {{ s }}.fail_jobs(%(ids)s, %(attempts)s, %(errors)s, %(retry_in)s, %(permanent)s)

-- name: snooze
select {{ s }}.snooze_job(%(id)s, %(attempt)s, %(delay)s) as ok

-- name: suspend
-- End an attempt in a wait (ctx.sleep, wait_for_event, wait_any, wait_for_jobs): 'waiting',
-- 'pending' (resolved at once), or null when fenced out.
select {{ s }}.suspend_job(%(id)s, %(attempt)s, %(step)s, %(occurrence)s, %(kind)s,
                           %(events)s::pg_catalog.text[], %(keys)s::pg_catalog.text[], %(due)s,
                           %(job_ids)s::pg_catalog.uuid[], %(delay)s::interval) as status

-- name: emit
-- Store an event and wake what waits for it (jobkit.emit): the event's id.
select {{ s }}.emit(%(name)s, %(key)s, %(data)s::pg_catalog.jsonb, %(id)s) as id

-- name: sweep_waits
select {{ s }}.sweep_waits() as woken

-- name: sweep_stuck
select id, status from {{ s }}.sweep_stuck()

-- name: sweep_dead
select {{ s }}.sweep_dead() as moved

-- name: retry
select {{ s }}.retry_job(%(id)s) as ok

-- name: cancel
select {{ s }}.cancel_job(%(id)s) as ok

-- name: prune
select {{ s }}.prune(%(older_than)s, %(batch_size)s) as deleted

-- name: get
select * from {{ s }}.jobs where id operator(pg_catalog.=) %(id)s

-- name: history
select attempt, worker_id, started_at, finished_at, outcome, error, duration
from {{ s }}.job_history where job_id operator(pg_catalog.=) %(id)s order by attempt, finished_at

-- name: state
-- What a waiting producer reads (jobkit.wait): no payload, no history.
select id, status, result, last_error, attempts, progress, completed_at
from {{ s }}.jobs where id operator(pg_catalog.=) %(id)s

-- name: wait_on
-- A waiter (jobkit.wait) registers the jobs it waits on, after it LISTENs: only these get the
-- completion notification (0014). p_for: how long it waits, after which the row expires.
select {{ s }}.wait_on(%(ids)s::pg_catalog.uuid[], %(for)s::interval)

-- name: flow_state
-- What a producer waiting on a flow reads: its jobs in order; results once every job ended.
select * from {{ s }}.flow_state(%(id)s)

-- name: progress
-- ids and attempts as array literals, the progress objects as one JSON array (parallel).
select * from {{ s }}.set_progress(%(ids)s::pg_catalog.uuid[], %(attempts)s::int[],
                                   %(progress)s::pg_catalog.jsonb) as id

-- name: create_flow
-- Types and payloads travel as JSON documents (the types as one string when they are all the same),
-- the edges as three arrays of 1-based positions and policies (none for a gather: fan_in); run_at
-- wins over now() + delay.
select f.flow_id, f.job_ids from {{ s }}.create_flow(
    %(name)s, %(types)s::pg_catalog.jsonb, %(payloads)s::pg_catalog.jsonb,
    %(parents)s::int[], %(children)s::int[], %(policies)s::pg_catalog.text[], %(priorities)s::int[],
    (select pg_catalog.array_agg(
                coalesce(u.r, pg_catalog.now() operator(pg_catalog.+) coalesce(u.d, '0')) order by u.o)
     from rows from (pg_catalog.unnest(%(run_ats)s::pg_catalog.timestamptz[]),
                     pg_catalog.unnest(%(delays)s::interval[])) with ordinality as u(r, d, o)),
    %(max_attempts)s::int[], %(trace_context)s::pg_catalog.jsonb, %(owner)s, %(fan_in)s) as f
