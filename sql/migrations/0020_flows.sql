-- jobkit 0020: job graphs (issue 25, items 4-6). jobkit.flow() inserts a whole graph in one
-- transaction: its jobs carry the flow's id, its edges are rows of job_edges, and a child waits in
-- 'blocked' (0018) with blocked_by counting the parents that have not ended yet. A parent that ends
-- settles its children once (jobs.children_settled): completion decrements the counter, a failure or
-- a cancel applies the edge's on_parent_failure (fail | cancel | run). A plain job pays nothing: its
-- flow_id is null, and the finishing statements look for children only when it is not.
-- New nullable columns without a default: catalog-only changes of jobs, no rewrite, and no CHECK
-- (every insert re-reads a check's expression, 0023; only 48_flows.sql writes them). No foreign keys
-- (like job_steps): delete and prune remove a job's edges with it, so deleting jobs costs no trigger.
-- squawk-ignore-file require-lock-timeout, require-statement-timeout, prefer-bigint-over-int
create table if not exists {{ s }}.flows (
    id         uuid primary key,
    name       text check (pg_catalog.char_length(name) between 1 and 200),
    created_at timestamptz not null default now(),
    paused_at  timestamptz,  -- pause_flow: its ready jobs stay blocked until resume_flow
    owner      text
);
alter table {{ s }}.flows enable row level security;

create table if not exists {{ s }}.job_edges (
    parent_id         uuid not null,
    child_id          uuid not null,
    on_parent_failure text not null default 'fail' check (on_parent_failure in ('fail', 'cancel', 'run')),
    primary key (parent_id, child_id),
    constraint job_edges_not_self check (parent_id <> child_id)
);
create index if not exists job_edges_child_idx on {{ s }}.job_edges (child_id);
alter table {{ s }}.job_edges enable row level security;

alter table {{ s }}.jobs add column if not exists flow_id uuid;
alter table {{ s }}.jobs add column if not exists blocked_by int;  -- a blocked child's parents not yet ended
alter table {{ s }}.jobs add column if not exists children_settled boolean;  -- a parent's children told it ended

-- The operator actions on flows and replays are audited like the others (widened NOT VALID, as 0018).
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.audit_log drop constraint if exists audit_log_action_check;
alter table {{ s }}.audit_log add constraint audit_log_action_check
    check (action in ('retry', 'cancel', 'delete', 'pause_schedule', 'resume_schedule', 'pause_type',
                      'resume_type', 'replay', 'cancel_flow', 'pause_flow', 'resume_flow'))
    not valid;

-- jobkit:outside-transaction
create index concurrently if not exists jobs_flow_idx on {{ s }}.jobs (flow_id) where flow_id is not null;
create index concurrently if not exists jobs_blocked_idx on {{ s }}.jobs (flow_id) where status operator(pg_catalog.=) 'blocked';
