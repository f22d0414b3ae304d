-- Job graphs (jobkit.flow, issue 25): create a flow, read a job's parents, operate a flow, replay.

-- name: cancel_flow
select {{ s }}.cancel_flow(%(id)s) as n

-- name: pause_flow
select {{ s }}.pause_flow(%(id)s) as n

-- name: resume_flow
select {{ s }}.resume_flow(%(id)s) as n

-- name: replay_job
select {{ s }}.replay_job(%(id)s, %(step)s) as id

-- name: flow_of
-- The flow a job belongs to (null: a plain job, or no such job).
select j.flow_id from {{ s }}.jobs j where j.id operator(pg_catalog.=) %(id)s

-- name: flow_get
select f.id, f.name, f.created_at, f.paused_at, f.owner from {{ s }}.flows f where f.id operator(pg_catalog.=) %(id)s

-- name: flow_jobs
-- A flow's jobs in the order they were given, with their parents' ids, for `jobkit flows show`
-- and the dashboard; at most %(limit)s of them.
select j.id, j.type, j.status, j.attempts, j.blocked_by, j.created_at, j.started_at, j.completed_at,
       j.last_error,
       coalesce((select pg_catalog.array_agg(e.parent_id order by e.parent_id)
                 from {{ s }}.job_edges e where e.child_id operator(pg_catalog.=) j.id), '{}') as parents
from {{ s }}.jobs j
where j.flow_id operator(pg_catalog.=) %(id)s
order by j.created_at, j.id
limit %(limit)s

-- name: flow_counts
select j.status, pg_catalog.count(*) as n from {{ s }}.jobs j
where j.flow_id operator(pg_catalog.=) %(id)s group by j.status

-- name: job_children
select c.id, c.type, c.status, e.on_parent_failure from {{ s }}.job_edges e
join {{ s }}.jobs c on c.id operator(pg_catalog.=) e.child_id
where e.parent_id operator(pg_catalog.=) %(id)s
order by c.created_at, c.id
limit %(limit)s

-- name: job_steps_of
-- A durable job's steps and resolved waits (kind 'wait'), in the order they started.
select t.name, t.occurrence, t.attempt, t.status, t.tries, t.started_at, t.finished_at, t.error, t.kind
from {{ s }}.job_steps t where t.job_id operator(pg_catalog.=) %(id)s
order by t.started_at, t.name, t.occurrence

-- name: job_wait_of
-- A waiting job's open wait (ctx.sleep, wait_for_event, wait_any, wait_for_jobs): what it waits
-- for and until when (its job_waits row; none once resolved).
select w.step, w.occurrence, w.attempt, w.kind, w.events, w.job_ids, w.due, w.created_at
from {{ s }}.job_waits w where w.job_id operator(pg_catalog.=) %(id)s

-- name: job_wait_jobs
-- The jobs a wait_for_jobs waits for, with their state (at most %(limit)s of them).
select j.id, j.type, j.status from {{ s }}.jobs j
where j.id operator(pg_catalog.=) any (%(ids)s::pg_catalog.uuid[])
order by j.created_at, j.id
limit %(limit)s

-- name: audit_flow
-- An operator's action on a flow or a replay (toolkit/ops/flows.py), written in its transaction.
insert into {{ s }}.audit_log (actor, action, target, matched, affected, finished_at)
values (%(actor)s, %(action)s, %(target)s, 1, %(changed)s, pg_catalog.now())
