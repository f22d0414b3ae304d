-- The worker's hot path: batched claims and fenced batched completions, one statement each.
{% from "shared/steps.sql" import completed_steps, fenced_steps_insert with context %}

-- name: claim
-- Only the columns a handler needs, in jobs.Claimed's order (decoding whole rows cost ~25 us a job).
select c.id, c.type, c.attempts, c.max_attempts, c.priority, c.payload, c.idempotency_key, c.trace_context
from {{ s }}.claim_jobs(%(type)s, %(limit)s, %(worker)s, %(lease)s, %(rate_key)s, %(max_attempts)s) c

-- name: extend
select * from {{ s }}.extend_leases(%(ids)s::pg_catalog.uuid[], %(attempts)s::int[], %(by)s) as id

-- name: running_check
-- Of the worker's running attempts, those that no longer hold their job, with its status now.
select id, status from {{ s }}.running_check(%(ids)s::pg_catalog.uuid[], %(attempts)s::int[])

-- name: release
select * from {{ s }}.release_jobs(%(ids)s::pg_catalog.uuid[], %(attempts)s::int[]) as id

-- name: take_tokens
select {{ s }}.take_tokens(%(key)s, %(want)s) as granted

-- name: token_wait
select extract(epoch from {{ s }}.token_wait(%(key)s))::pg_catalog.float8 as seconds

-- name: due_count
select {{ s }}.due_count(%(type)s) as due

-- name: due_types
-- Types with pending jobs, and types with a waiting job whose sleep ended or wait timed out.
select t as type from {{ s }}.pending_types() as p(t)
union
select distinct w.type from {{ s }}.job_waits w where w.due operator(pg_catalog.<=) pg_catalog.now()

-- name: next_due
-- Seconds until the type's next pending job is due, by the database's clock (null: none pending).
select extract(epoch from {{ s }}.next_due(%(type)s)
    operator(pg_catalog.-) pg_catalog.now())::pg_catalog.float8 as seconds

-- name: worker_keys
select current_secret, previous_secret from {{ s }}.worker_keys()

-- name: record_types
-- A worker's handler types, recorded when it starts (the types the CLI knows: ops/types.py).
select {{ s }}.record_types(%(types)s::pg_catalog.text[])

-- name: worker_beat
-- A worker's heartbeat (0021): one upsert of its own row, every few seconds (worker/presence.py).
select {{ s }}.worker_beat(%(id)s, %(host)s, %(pid)s, %(version)s, %(transport)s, %(concurrency)s,
    %(types)s::pg_catalog.text[], %(running)s, %(heartbeat)s, %(started_at)s)

-- name: worker_gone
-- A worker's clean shutdown: its row is marked gone.
select {{ s }}.worker_gone(%(id)s)

-- name: worker_counts
-- /metrics' jobkit_workers: workers by state (the workers table holds a row per worker process).
select w.state, pg_catalog.count(*) as n from {{ s }}.workers_now() w group by w.state

-- name: ping
select 1 as ok

-- name: backlog
-- /metrics' backlog: pending jobs due now per type and the oldest due one's age (one pass over the
-- claim index's pending rows; the worker caches the answer for [metrics] ttl).
select type, pg_catalog.count(*) as due,
       extract(epoch from pg_catalog.now()
           operator(pg_catalog.-) pg_catalog.min(scheduled_for))::pg_catalog.float8 as oldest_due_s
from {{ s }}.jobs
where status operator(pg_catalog.=) 'pending' and scheduled_for operator(pg_catalog.<=) pg_catalog.now()
group by type
order by type

-- name: consume_wake
-- A signed wake-up, accepted once per fleet: true the first time its signature is consumed.
select {{ s }}.consume_wake(%(nonce)s, %(expires_at)s) as fresh

-- name: wake_draining
select {{ s }}.wake_draining(%(type)s, %(for)s)

-- name: wake_idle
select {{ s }}.wake_idle(%(type)s, %(handoff)s) as idle

-- name: load_steps
-- Jobs' completed durable steps (ctx.step): read at their first step, many jobs in one statement.
-- load_steps' query read directly (prepared once; the SQL function, not inlined because of its
-- pinned search_path, planned its query again on every call), one probe of job_steps' primary key
-- per job: the lateral subquery keeps the plan a nested loop whatever the table's statistics say
-- (a cached plan made while job_steps was small or not analyzed yet scanned all of it); the ids
-- through a scalar subquery, so that their number does not make custom plans look cheaper, and in
-- binary (no array literal to parse). The query is sql/shared/steps.sql's, the same text the
-- load_steps function runs.
{{ completed_steps(ids="(select %(ids)b::pg_catalog.uuid[])") }}

-- name: save_steps
-- Steps' records, many in one statement, fenced by their attempts: the (id, attempt) pairs held.
-- hold: lock the held jobs until the transaction ends (a transactional step).
select id, attempt from {{ s }}.save_steps(
    %(ids)s::pg_catalog.uuid[], %(attempts)s::int[], %(names)s::pg_catalog.text[],
    %(occurrences)s::int[], %(results)s::pg_catalog.jsonb, %(errors)s::pg_catalog.text[],
    %(tries)s::int[], %(started_at)s::pg_catalog.timestamptz[], %(hold)s)

-- name: save_steps_direct
-- Steps' records written by the statement itself, fenced by their attempts as save_steps' usual
-- batch is (the PostgreSQL backend's path for plain steps, prepared: no plpgsql call, no second
-- query for the answer, no subtransaction): the (id, attempt) pairs held. Its records are the
-- worker's own (names and occurrences checked by it); the fenced insert is sql/shared/steps.sql's,
-- the same text save_steps' usual batch runs. A record that meets a stored one makes the
-- primary key refuse the statement, and the worker sends the batch to save_steps instead. One
-- function scan (the names, the one array of variable width); the other arrays are read by
-- subscript (fixed width: no walk from the start). The names, which size the plan, are read through
-- a scalar subquery: the planner cannot see their number, so a custom plan costs what the generic
-- plan costs and the plan cache keeps the generic one (seeing 1 to 4 records, it planned every
-- execution anew: 376,000 instructions a record against 70,600 at 16). The arrays go in binary
-- (lifecycle.steps_binary_params): no array literal to parse.
{{ fenced_steps_insert(
    ids="%(ids)b::pg_catalog.uuid[]", attempts="%(attempts)b::int[]",
    names_scan="(select %(names)b::pg_catalog.text[])", occurrences="%(occurrences)b::int[]",
    results="%(results)s::pg_catalog.jsonb", errors="%(errors)b::pg_catalog.text[]",
    tries="%(tries)b::int[]", started_at="%(started_at)b::pg_catalog.timestamptz[]") }}
select h.id, h.attempts from held h

-- name: parents
-- A job's parents as they ended (ctx.parents), in the order the flow gave them.
select p.id, p.type, p.status, p.result, p.error, p.on_parent_failure from {{ s }}.job_parents(%(id)s) as p
