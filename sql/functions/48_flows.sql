-- The public API: job graphs (jobkit.flow, issue 25)
-- sql/functions/48_flows.sql: a graph inserted in one statement per table, children released as their parents end, the blocked sweep, cancel/pause/resume of a flow, and replay from a step.
-- Applied in file-name order (after 45_steps.sql, before 50_operate.sql); sql/functions/README.md says how deploy applies these files.

-- Insert a whole graph in one transaction: one INSERT ... SELECT for its jobs and one for its edges.
-- Jobs are given as JSON documents (p_types: an array, or one string for all; p_payloads: an array),
-- the other columns as arrays parallel to them (null = defaults); edges as three parallel arrays of
-- 1-based positions (p_parents[k] -> p_children[k]) and policies ('fail' when null). A parent must
-- come before its child (p_parents[k] < p_children[k]): a graph in that order has no cycle, so no
-- job of it can be blocked forever by its own descendants. A job with parents is inserted
-- 'blocked' with blocked_by = its number of parents; the others are pending and woken as any job.
-- p_fan_in (a gather, jobkit.gather): no edges are given; the last job is after all the others by
-- 'run' edges that are not stored (flows.fan_in names it, 0024), so a fan-in of N jobs costs a
-- counter instead of N edge rows. Returns the flow's id and the jobs' ids in input order.
create or replace function {{ s }}.create_flow(
    p_name text,
    p_types jsonb,
    p_payloads jsonb,
    p_parents int[],
    p_children int[],
    p_policies text[] default null,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_trace_context jsonb default null,
    p_owner text default null,
    p_fan_in boolean default false
) returns table (flow_id uuid, job_ids uuid[])
language plpgsql volatile set search_path = '' as $$
declare
    v_n int;
    v_edges int := coalesce(pg_catalog.cardinality(p_parents), 0);
    v_flow uuid := pg_catalog.gen_random_uuid();
    v_ids uuid[];
    v_one text;
    v_fan int;  -- the fan-in's position
begin
    if pg_catalog.jsonb_typeof(p_payloads) is distinct from 'array'
       or pg_catalog.jsonb_typeof(p_types) not in ('array', 'string') then
        raise exception 'jobkit.create_flow: p_payloads must be a JSON array, p_types a JSON array or string'
            using errcode = '22023', hint = 'pass one payload per job';
    end if;
    v_n := pg_catalog.jsonb_array_length(p_payloads);
    if v_n = 0 or (pg_catalog.jsonb_typeof(p_types) = 'array' and pg_catalog.jsonb_array_length(p_types) <> v_n) then
        raise exception 'jobkit.create_flow: a flow needs at least one job, and as many types as payloads'
            using errcode = '22023', hint = 'pass one type per payload, or one type for all';
    end if;
    v_one := case when pg_catalog.jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    if coalesce(v_one, 'x') = '' or exists (
           select 1 from pg_catalog.jsonb_array_elements(
                             case when v_one is null then p_types else '[]'::jsonb end) as t(v)
           where pg_catalog.jsonb_typeof(t.v) is distinct from 'string' or t.v #>> '{}' = '') then
        raise exception 'jobkit.create_flow: every job type must be a non-empty string'
            using errcode = '22023', hint = 'name a registered job type for each job';
    end if;
    if pg_catalog.cardinality(p_children) is distinct from pg_catalog.cardinality(p_parents)
       or (p_policies is not null and pg_catalog.cardinality(p_policies) <> v_edges) then
        raise exception 'jobkit.create_flow: p_parents, p_children and p_policies must be as long as each other'
            using errcode = '22023', hint = 'pass one element per edge';
    end if;
    if exists (select 1 from unnest(p_parents, p_children, p_policies) as e(p, c, pol)
               where e.p is null or e.c is null or e.p < 1 or e.c > v_n or e.p >= e.c
                  or coalesce(e.pol, 'fail') not in ('fail', 'cancel', 'run')) then
        raise exception 'jobkit.create_flow: each edge joins an earlier job (parent) to a later one (child), by 1-based position, with a policy fail, cancel or run'
            using errcode = '22023', hint = 'list a parent before its children (a graph in that order has no cycle)';
    end if;
    if p_fan_in and v_edges > 0 then
        raise exception 'jobkit.create_flow: a fan-in (p_fan_in) takes no edges: its last job is after all the others'
            using errcode = '22023', hint = 'pass empty p_parents and p_children with p_fan_in => true';
    end if;
    v_fan := case when coalesce(p_fan_in, false) and v_n > 1 then v_n end;
    -- Ids are drawn first: edges refer to them by position, and they come back in input order.
    v_ids := array(select pg_catalog.gen_random_uuid() from pg_catalog.generate_series(1, v_n));
    insert into {{ s }}.flows (id, name, owner, fan_in) values (v_flow, p_name, p_owner, v_ids[v_fan]);
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, trace_context,
                              concurrency_key, owner, flow_id, status, blocked_by, created_at)
    select v_ids[e.n], x.type, e.v, coalesce(p_priority[e.n], 0), coalesce(p_run_at[e.n], pg_catalog.now()),
           p_max_attempts[e.n], p_trace_context,
           case when t.key_template is not null then {{ s }}._render_key(t.key_template, e.v)
                when t.fair then '' end,
           p_owner, v_flow,
           case when d.parents is null then 'pending' else 'blocked' end, d.parents,
           pg_catalog.now() + (e.n - 1) * interval '1 microsecond'  -- the given order, for show and parents()
    from pg_catalog.jsonb_array_elements(p_payloads) with ordinality as e(v, n)
    cross join lateral (select coalesce(v_one, p_types ->> (e.n - 1)::int) as type) x
    left join (select u.c, pg_catalog.count(*)::int as parents from unnest(p_children) as u(c) group by u.c
               union all
               select v_fan, v_n - 1 where v_fan is not null) d
           on d.c = e.n
    left join {{ s }}.job_types t on t.type = x.type and t.fair;
    -- An edge given twice is refused by job_edges' primary key (the ids are new, so no other
    -- transaction's edge can collide): no pass over the edges to look for one beforehand.
    begin
        insert into {{ s }}.job_edges (parent_id, child_id, on_parent_failure)
        select v_ids[e.p], v_ids[e.c], coalesce(e.pol, 'fail')
        from unnest(p_parents, p_children, p_policies) as e(p, c, pol);
    exception when unique_violation then
        raise exception 'jobkit.create_flow: an edge is given twice'
            using errcode = '22023', hint = 'give each parent -> child edge once';
    end;
    return query select v_flow, v_ids;
end
$$;

-- Tell the children of jobs that just ended (completed, failed, dead or cancelled) that they did,
-- once per parent (children_settled): a completed parent, or a failed or cancelled one behind a
-- 'run' edge, takes one off the child's blocked_by, and at zero the child is pending (unless its
-- flow is paused) and its type is woken; a failed parent fails a 'fail' child and cancels a
-- 'cancel' child, a cancelled parent cancels both. A child failed or cancelled so is itself a parent
-- that ended: the loop carries the failure down the graph, one level per pass. O(children): the
-- edges are read by their parent (the primary key); a gather's fan-in (flows.fan_in, 0024) is a
-- 'run' edge from each job of its flow created before it, read from the flow. Called by the finishing statements only for
-- jobs of a flow (flow_id not null): a plain job never gets here.
create or replace function {{ s }}._settle_children(p_ids uuid[]) returns void
language plpgsql volatile set search_path = '' as $$
declare
    v_parents uuid[] := p_ids;
    v_children uuid[];
    v_done int[];
    v_fails boolean[];
    v_cancels boolean[];
    v_paused boolean[];
    v_ended uuid[];
    r record;
begin
    while coalesce(pg_catalog.cardinality(v_parents), 0) > 0 loop
        with ended as (
            update {{ s }}.jobs p set children_settled = true
            where p.id = any (v_parents) and p.flow_id is not null and p.children_settled is null
              and p.status in ('completed', 'failed', 'dead', 'cancelled')
            returning p.id, p.status, p.flow_id, p.created_at
        ), edges as (  -- the stored edges, and a fan-in's (the flow's callback, after the jobs created before it)
            select d.status, d.flow_id, e.child_id, e.on_parent_failure
            from ended d join {{ s }}.job_edges e on e.parent_id = d.id
            union all
            select d.status, d.flow_id, g.fan_in, 'run'
            from ended d
            join {{ s }}.flows g on g.id = d.flow_id
            join {{ s }}.jobs c on c.id = g.fan_in and c.created_at > d.created_at
        ), told as (
            select e.child_id,
                   (pg_catalog.count(*) filter (where e.status = 'completed' or e.on_parent_failure = 'run'))::int
                       as done,
                   pg_catalog.bool_or(e.status in ('failed', 'dead') and e.on_parent_failure = 'fail') as fails,
                   pg_catalog.bool_or(e.status <> 'completed' and e.on_parent_failure <> 'run') as cancels,
                   pg_catalog.bool_or(f.paused_at is not null) as paused
            from edges e
            left join {{ s }}.flows f on f.id = e.flow_id
            group by e.child_id
        )
        select pg_catalog.array_agg(t.child_id order by t.child_id), pg_catalog.array_agg(t.done order by t.child_id),
               pg_catalog.array_agg(t.fails order by t.child_id), pg_catalog.array_agg(t.cancels order by t.child_id),
               pg_catalog.array_agg(t.paused order by t.child_id)
        into v_children, v_done, v_fails, v_cancels, v_paused
        from told t;
        exit when v_children is null;
        -- children locked in id order: concurrent completions of parents they share never deadlock
        perform 1 from {{ s }}.jobs c where c.id = any (v_children) order by c.id for update;
        v_ended := null;
        for r in
            with changed as (
                update {{ s }}.jobs j
                set blocked_by = greatest(j.blocked_by - t.done, 0),
                    status = case when t.fails then 'failed' when t.cancels then 'cancelled'
                                  when j.blocked_by - t.done > 0 or t.paused then 'blocked'
                                  else 'pending' end,
                    scheduled_for = case when t.fails or t.cancels then j.scheduled_for
                                         else greatest(j.scheduled_for, pg_catalog.now()) end,
                    completed_at = case when t.fails or t.cancels then pg_catalog.now() end,
                    last_error = case when t.fails then 'a parent of this job failed (on_parent_failure = fail)'
                                      when t.cancels then 'a parent of this job failed or was cancelled'
                                      else j.last_error end,
                    updated_at = pg_catalog.now()
                from unnest(v_children, v_done, v_fails, v_cancels, v_paused) as t(child_id, done, fails, cancels, paused)
                where j.id = t.child_id and j.status = 'blocked'
                returning j.id, j.status, j.type, j.scheduled_for
            )
            select c.type, c.status, pg_catalog.array_agg(c.id) as ids,
                   pg_catalog.count(*) filter (where c.scheduled_for <= pg_catalog.now()) as due,
                   pg_catalog.min(c.scheduled_for) filter (where c.scheduled_for > pg_catalog.now()) as at
            from changed c where c.status <> 'blocked' group by c.type, c.status
        loop
            if r.status = 'pending' then
                perform {{ s }}._wake_for(r.type, r.due, r.at);
            else
                v_ended := coalesce(v_ended, '{}') || r.ids;
            end if;
        end loop;
        if v_ended is not null then
            perform {{ s }}._notify_done(v_ended);
        end if;
        v_parents := v_ended;
    end loop;
end
$$;

-- The backstop (run by sweep_stuck): no job stays blocked after its parents ended. Parents that
-- ended without telling their children (a path that missed _settle_children) are settled now; a
-- child whose parent is gone (deleted) counts that parent as cancelled; a blocked job with nothing
-- left to wait for in a flow that is not paused is released. Reads only blocked jobs
-- (jobs_state_idx): nothing when no graph is blocked. Returns how many jobs it moved.
create or replace function {{ s }}._sweep_blocked() returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_moved int := 0;
    v_ids uuid[];
    r record;
begin
    if not exists (select 1 from {{ s }}.jobs b where b.status = 'blocked') then
        return 0;
    end if;
    -- 1. parents that ended but never settled their children (by a stored edge, or a fan-in's)
    select pg_catalog.array_agg(distinct x.id) into v_ids
    from (select p.id, p.status, p.children_settled
          from {{ s }}.jobs c
          join {{ s }}.job_edges e on e.child_id = c.id
          join {{ s }}.jobs p on p.id = e.parent_id
          where c.status = 'blocked'
          union all
          select p.id, p.status, p.children_settled
          from {{ s }}.jobs c
          join {{ s }}.flows g on g.id = c.flow_id and g.fan_in = c.id
          join {{ s }}.jobs p on p.flow_id = g.id and p.created_at < c.created_at
          where c.status = 'blocked') x
    where x.children_settled is null and x.status in ('completed', 'failed', 'dead', 'cancelled');
    if v_ids is not null then
        perform {{ s }}._settle_children(v_ids);
    end if;
    -- 2. blocked jobs with nothing left to wait for, counted from their parents as they are now (a
    -- gone parent counts as cancelled). Only released, never held back more: a count that races
    -- with a completion is corrected by the completion itself.
    for r in
        with counted as (
            select c.id,
                   (pg_catalog.count(e.parent_id) filter (
                        where p.id is not null and (p.children_settled is null
                                                    or p.status not in ('completed', 'failed', 'dead', 'cancelled'))))::int
                       as open,
                   coalesce(pg_catalog.bool_or(p.id is null and e.on_parent_failure <> 'run'), false) as orphaned,
                   coalesce(pg_catalog.bool_or(f.paused_at is not null), false) as paused
            from {{ s }}.jobs c
            left join lateral (
                select e.parent_id, e.on_parent_failure from {{ s }}.job_edges e where e.child_id = c.id
                union all
                select p2.id, 'run' from {{ s }}.flows g
                join {{ s }}.jobs p2 on p2.flow_id = g.id and p2.created_at < c.created_at
                where g.id = c.flow_id and g.fan_in = c.id
            ) e on true
            left join {{ s }}.jobs p on p.id = e.parent_id
            left join {{ s }}.flows f on f.id = c.flow_id
            where c.status = 'blocked'
            group by c.id
        ), changed as (
            update {{ s }}.jobs j
            set status = case when x.orphaned then 'cancelled' else 'pending' end,
                blocked_by = 0,
                scheduled_for = greatest(j.scheduled_for, pg_catalog.now()),
                completed_at = case when x.orphaned then pg_catalog.now() end,
                last_error = case when x.orphaned then 'a parent of this job was deleted' else j.last_error end,
                updated_at = pg_catalog.now()
            from counted x
            where j.id = x.id and j.status = 'blocked' and (x.orphaned or (x.open = 0 and not x.paused))
            returning j.id, j.status, j.type
        )
        select c.type, c.status, pg_catalog.array_agg(c.id) as ids, pg_catalog.count(*) as n
        from changed c group by c.type, c.status
    loop
        v_moved := v_moved + r.n::int;
        if r.status = 'pending' then
            perform {{ s }}._wake_for(r.type, r.n, null);
        else
            perform {{ s }}._notify_done(r.ids);
            perform {{ s }}._settle_children(r.ids);
        end if;
    end loop;
    return v_moved;
end
$$;

-- Cancel a flow: every job of it that has not ended (pending, blocked, waiting, processing) is
-- cancelled; a running attempt is told on its heartbeat (running_check) and its completion is
-- refused, as cancel_job. Returns how many jobs were cancelled.
create or replace function {{ s }}.cancel_flow(p_flow uuid) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    with target as (
        select j.id, j.status as was from {{ s }}.jobs j
        where j.flow_id = p_flow and j.status in ('pending', 'blocked', 'waiting', 'processing')
        order by j.id
        for update
    ), changed as (
        update {{ s }}.jobs j
        set status = 'cancelled', completed_at = pg_catalog.now(), lease_expires_at = null,
            children_settled = true, updated_at = pg_catalog.now(),
            last_error = coalesce(j.last_error, 'its flow was cancelled')
        from target t
        where j.id = t.id
        returning j.id, j.attempts, j.worker_id, j.started_at, t.was
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome)
        select c.id, c.attempts, c.worker_id, c.started_at, 'cancelled' from changed c
        where c.was = 'processing' and c.worker_id is not null and c.attempts > 0
    )
    select pg_catalog.array_agg(c.id) into v_ids from changed c;
    if v_ids is null then
        return 0;
    end if;
    delete from {{ s }}.job_waits w where w.job_id = any (v_ids);  -- the waits of its waiting jobs
    perform {{ s }}._notify_done(v_ids);
    return pg_catalog.cardinality(v_ids);
end
$$;

-- Pause a flow: its pending jobs go back to blocked (with nothing left to wait for), and children
-- that become ready stay blocked until resume_flow; running and waiting jobs go on. Returns how many
-- pending jobs it held back, null when there is no such flow.
create or replace function {{ s }}.pause_flow(p_flow uuid) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_n int;
begin
    update {{ s }}.flows f set paused_at = coalesce(f.paused_at, pg_catalog.now()) where f.id = p_flow;
    if not found then
        return null;
    end if;
    with held as (
        update {{ s }}.jobs j set status = 'blocked', blocked_by = 0, updated_at = pg_catalog.now()
        where j.flow_id = p_flow and j.status = 'pending'
        returning 1
    )
    select pg_catalog.count(*)::int into v_n from held;
    return v_n;
end
$$;

-- Resume a paused flow: its blocked jobs with no parent left to wait for are pending again and their
-- types are woken. Returns how many it released, null when there is no such flow.
create or replace function {{ s }}.resume_flow(p_flow uuid) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_n int := 0;
    r record;
begin
    update {{ s }}.flows f set paused_at = null where f.id = p_flow;
    if not found then
        return null;
    end if;
    for r in
        with released as (
            update {{ s }}.jobs j
            set status = 'pending', scheduled_for = greatest(j.scheduled_for, pg_catalog.now()),
                updated_at = pg_catalog.now()
            where j.flow_id = p_flow and j.status = 'blocked' and coalesce(j.blocked_by, 0) = 0
            returning j.type
        )
        select x.type, pg_catalog.count(*) as n from released x group by x.type
    loop
        v_n := v_n + r.n::int;
        perform {{ s }}._wake_for(r.type, r.n, null);
    end loop;
    return v_n;
end
$$;

-- The parents of a job with what they ended with (ctx.parents): id, type, status, result, error and
-- the edge's policy, in the order the flow listed them (parents come before children). A fan-in's
-- parents (a gather's callback) are the jobs of its flow created before it, by 'run' edges.
create or replace function {{ s }}.job_parents(p_id uuid)
returns table (id uuid, type text, status text, result jsonb, error text, on_parent_failure text)
language sql stable set search_path = '' as $$
    select p.id, p.type, p.status, p.result, p.last_error, e.on_parent_failure
    from (select e.parent_id, e.on_parent_failure from {{ s }}.job_edges e where e.child_id = p_id
          union all  -- a fan-in's parents: the jobs of its flow created before it
          select p2.id, 'run' from {{ s }}.jobs c
          join {{ s }}.flows g on g.id = c.flow_id and g.fan_in = c.id
          join {{ s }}.jobs p2 on p2.flow_id = g.id and p2.created_at < c.created_at
          where c.id = p_id) e
    join {{ s }}.jobs p on p.id = e.parent_id
    order by p.created_at, p.id
$$;

-- What a producer waiting on a flow reads (jobkit.wait on a FlowRun, jobkit.wait_flow): the flow's
-- jobs in the order it gave them (a replayed job after them), each with its status, attempts and end
-- time; their results, last errors and progress only once every job of the flow ended (completed,
-- failed, dead or cancelled), so a poll while it runs reads no result. No row: no job has that
-- flow id (an unknown flow, or one whose jobs were pruned). Reads the flow's jobs by jobs_flow_state_idx.
create or replace function {{ s }}.flow_state(p_flow uuid)
returns table (id uuid, status text, result jsonb, last_error text, attempts int, progress jsonb,
               completed_at timestamptz)
language plpgsql stable set search_path = '' as $$
begin
    if exists (select 1 from {{ s }}.jobs j
               where j.flow_id = p_flow and j.status not in ('completed', 'failed', 'dead', 'cancelled')) then
        return query select j.id, j.status, null::jsonb, null::text, j.attempts, null::jsonb, j.completed_at
                     from {{ s }}.jobs j where j.flow_id = p_flow order by j.created_at, j.id;
        return;
    end if;
    return query select j.id, j.status, j.result, j.last_error, j.attempts, j.progress, j.completed_at
                 from {{ s }}.jobs j where j.flow_id = p_flow order by j.created_at, j.id;
end
$$;

-- Replay a job from one of its steps: a new pending job of the same type, payload and flow, whose
-- stored steps are copies of the completed steps the original started before the first occurrence of
-- p_step (so they return their stored results and do not run again); p_step and everything after
-- it run anew. The original is left as it is. Returns the new job's id.
create or replace function {{ s }}.replay_job(p_id uuid, p_step text) returns uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_new uuid := pg_catalog.gen_random_uuid();
    v_from timestamptz;
begin
    if not exists (select 1 from {{ s }}.jobs j where j.id = p_id) then
        raise exception 'jobkit.replay_job: no job %', p_id
            using errcode = 'P0002', hint = 'list jobs with `jobkit jobs list`';
    end if;
    select pg_catalog.min(t.started_at) into v_from
    from {{ s }}.job_steps t where t.job_id = p_id and t.name = p_step;
    if v_from is null then
        raise exception 'jobkit.replay_job: job % has no step named %', p_id, p_step
            using errcode = '22023', hint = 'see its steps with `jobkit jobs show ID`';
    end if;
    insert into {{ s }}.jobs (id, type, payload, priority, max_attempts, trace_context, concurrency_key, owner,
                              flow_id)
    select v_new, j.type, j.payload, j.priority, j.max_attempts, j.trace_context, j.concurrency_key, j.owner,
           j.flow_id
    from {{ s }}.jobs j where j.id = p_id;
    insert into {{ s }}.job_steps (job_id, name, occurrence, attempt, status, result, tries, started_at, finished_at)
    select v_new, t.name, t.occurrence, 0, 'completed', t.result, t.tries, t.started_at, t.finished_at
    from {{ s }}.job_steps t
    where t.job_id = p_id and t.status = 'completed' and t.started_at < v_from;
    return v_new;
end
$$;
