-- The dashboard's pages (`jobkit dashboard`). Each query reads through an index that keeps it fast
-- at millions of jobs (docs/BENCHMARKS.md, "Dashboard queries at 1M jobs", has their timings and
-- plans): the partial indexes of the job states, jobs_created_page_idx for the jobs page (only with [dashboard] created_index = true), the GIN
-- index for payload search and the time indexes for the charts. Filters are bound parameters; a
-- null parameter means "no filter" (the dashboard's connections never prepare statements, so each
-- query is planned with its values and drops the unused conditions).

{#- The jobs filter (toolkit/ops/selection.py): one definition for the page, the count and the
    batches of an action (toolkit/ops/operate.py, from the dashboard or the CLI), so "every job
    matching the filter" means the same in all of them. #}
{% macro job_filter() -%}
and (%(type)s::pg_catalog.text is null or type operator(pg_catalog.=) %(type)s)
  and (%(status)s::pg_catalog.text is null or status operator(pg_catalog.=) %(status)s)
  and (%(key)s::pg_catalog.text is null or concurrency_key operator(pg_catalog.=) %(key)s)
  and (%(since)s::pg_catalog.timestamptz is null or created_at operator(pg_catalog.>=) %(since)s)
  and (%(until)s::pg_catalog.timestamptz is null or created_at operator(pg_catalog.<) %(until)s)
  and (%(worker)s::pg_catalog.text is null or worker_id operator(pg_catalog.=) %(worker)s)
  and (%(error)s::pg_catalog.text is null
       or pg_catalog.strpos(pg_catalog.lower(last_error),
           pg_catalog.lower(%(error)s)) operator(pg_catalog.>) 0)
  and (%(payload)s::pg_catalog.jsonb is null or payload operator(pg_catalog.@>) %(payload)s)
{%- endmacro %}

-- name: dash_pending
-- Pending jobs per type: due now, scheduled later, and the age of the oldest due (jobs_claim_idx).
select type,
       pg_catalog.count(*) filter (where scheduled_for operator(pg_catalog.<=) pg_catalog.now()) as due,
       pg_catalog.count(*) filter (where scheduled_for operator(pg_catalog.>) pg_catalog.now()) as scheduled,
       extract(epoch from pg_catalog.now() operator(pg_catalog.-) pg_catalog.min(scheduled_for)
                              filter (where scheduled_for
                                  operator(pg_catalog.<=) pg_catalog.now()))::pg_catalog.float8 as oldest_due_s
from {{ s }}.jobs where status operator(pg_catalog.=) 'pending' group by type

-- name: dash_processing
-- The lease predicate lets jobs_lease_idx answer it.
select type, pg_catalog.count(*) as processing
from {{ s }}.jobs where lease_expires_at is not null
    and status operator(pg_catalog.=) 'processing' group by type

-- name: dash_stopped
-- Failed and dead jobs per type (jobs_failed_idx, jobs_state_idx).
select type, pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'failed') as failed,
       pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'dead') as dead
from (select type, status from {{ s }}.jobs where status operator(pg_catalog.=) 'failed'
      union all
      select type, status from {{ s }}.jobs where status operator(pg_catalog.=) 'dead') f
group by type

-- name: dash_finished_recent
-- Jobs finished in the last hour per type (index-only on jobs_finished_idx).
select type,
       pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'completed') as completed_1h,
       pg_catalog.count(*) filter (where status operator(pg_catalog.=) 'cancelled') as cancelled_1h
from {{ s }}.jobs
where status operator(pg_catalog.=) any ('{completed,dead,cancelled}')
    and completed_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
group by type

-- name: dash_durations
-- Handler run time p50/p95/p99 per type over the attempts that ended in the last hour: the
-- completing attempts (on the job rows) and the failed, retried and snoozed ones (job_attempts).
-- Expired leases and cancellations are not handler run times.
select d.type,
       pg_catalog.percentile_cont(array[0.5, 0.95, 0.99]::pg_catalog.float8[]) within group (
           order by d.seconds) as durations
from (
    select j.type,
        extract(epoch from j.completed_at operator(pg_catalog.-) j.started_at)::pg_catalog.float8 as seconds
    from {{ s }}.jobs j
    where j.status operator(pg_catalog.=) 'completed'
        and j.completed_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
      and j.started_at is not null
    union all
    select j.type, extract(epoch from a.duration)::pg_catalog.float8
    from {{ s }}.job_attempts a join {{ s }}.jobs j on j.id operator(pg_catalog.=) a.job_id
    where a.finished_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
        and a.duration is not null
      and a.outcome operator(pg_catalog.=) any ('{retry,failed,snoozed}')
) d
group by d.type

-- name: dash_attempts_recent
-- Attempts that did not complete, in the last hour per type (job_attempts_finished_idx).
select j.type,
       pg_catalog.count(*) filter (where a.outcome
           operator(pg_catalog.=) any ('{retry,failed,lease_expired}')) as failed_attempts_1h,
       pg_catalog.count(*) filter (where a.outcome operator(pg_catalog.=) 'snoozed') as snoozed_1h
from {{ s }}.job_attempts a join {{ s }}.jobs j on j.id operator(pg_catalog.=) a.job_id
where a.finished_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
group by j.type

-- name: dash_throughput
-- Completions per minute over a window (an interval), all types or one.
select extract(epoch from pg_catalog.date_trunc('minute', completed_at))::bigint as minute,
       pg_catalog.count(*) as n
from {{ s }}.jobs
where status operator(pg_catalog.=) 'completed'
  and completed_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) %(window)s::interval)
  and (%(type)s::pg_catalog.text is null or type operator(pg_catalog.=) %(type)s)
group by 1 order by 1

-- name: dash_failures
-- Failed attempts per minute over a window (retries, final failures, expired leases).
select extract(epoch from pg_catalog.date_trunc('minute', a.finished_at))::bigint as minute,
       pg_catalog.count(*) as n
from {{ s }}.job_attempts a
where a.finished_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) %(window)s::interval)
  and a.outcome operator(pg_catalog.=) any ('{retry,failed,lease_expired}')
  and (%(type)s::pg_catalog.text is null
       or exists (select 1 from {{ s }}.jobs j where j.id operator(pg_catalog.=) a.job_id
           and j.type operator(pg_catalog.=) %(type)s))
group by 1 order by 1

-- name: dash_wakeups
-- pg_net wake-ups of the last hour by outcome, as the cron backup last reconciled them (a page
-- view never writes: pg_net's answers not yet copied show as awaiting).
select w.type, coalesce(w.outcome, 'awaiting') as outcome, pg_catalog.count(*) as n
from {{ s }}.wakeups w
where w.created_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
group by 1, 2 order by 1, 2

-- name: dash_jobs_page
-- One page of jobs matching the filter, newest first, after the keyset (created_at, id).
select id, type, status, priority, attempts, created_at, scheduled_for, completed_at, worker_id,
       pg_catalog.left(pg_catalog.substring(pg_catalog.rtrim(coalesce(last_error, ''), E' \n'), E'[^\n]*$'),
                       160) as error,
       pg_catalog.right(last_error, 2000) as error_tail
from {{ s }}.jobs
where true
  {{ job_filter() }}
  and (%(before_at)s::pg_catalog.timestamptz is null
      or (created_at, id) operator(pg_catalog.<) (%(before_at)s, %(before_id)s))
order by created_at desc, id desc
limit %(limit)s

-- name: dash_jobs_count
-- How many jobs match the filter and are in one of the states an action applies to.
select pg_catalog.count(*) as n
from {{ s }}.jobs
where status operator(pg_catalog.=) any(%(states)s)
  {{ job_filter() }}

-- name: dash_jobs_batch
-- The next batch of an action on "every job matching the filter", oldest first after (created_at, id).
select id, created_at
from {{ s }}.jobs
where status operator(pg_catalog.=) any(%(states)s)
  {{ job_filter() }}
  and (%(after_at)s::pg_catalog.timestamptz is null
      or (created_at, id) operator(pg_catalog.>) (%(after_at)s, %(after_id)s))
order by created_at, id
limit %(limit)s

-- name: ops_jobs_sample
-- The first jobs an action on the filter would change, in its batches' order (a confirmation's sample).
select id, type, status, created_at,
       pg_catalog.left(pg_catalog.substring(pg_catalog.rtrim(coalesce(last_error, ''), E' \n'), E'[^\n]*$'),
                       160) as error
from {{ s }}.jobs
where status operator(pg_catalog.=) any(%(states)s)
  {{ job_filter() }}
order by created_at, id
limit %(limit)s

-- name: ops_ids_sample
select id, type, status, created_at,
       pg_catalog.left(pg_catalog.substring(pg_catalog.rtrim(coalesce(last_error, ''), E' \n'), E'[^\n]*$'),
                       160) as error
from {{ s }}.jobs where id operator(pg_catalog.=) any(%(ids)s)
    and status operator(pg_catalog.=) any(%(states)s)
order by created_at, id
limit %(limit)s

-- name: dash_ids_count
select pg_catalog.count(*) as n from {{ s }}.jobs where id operator(pg_catalog.=) any(%(ids)s)
    and status operator(pg_catalog.=) any(%(states)s)

-- name: dash_retry_jobs
select {{ s }}.retry_jobs(%(ids)s) as n

-- name: dash_cancel_jobs
select {{ s }}.cancel_jobs(%(ids)s) as n

-- name: dash_delete_jobs
select {{ s }}.delete_jobs(%(ids)s) as n

-- name: dash_types
select type from {{ s }}.job_types where type operator(pg_catalog.<>) '*'
union
select distinct type from {{ s }}.jobs where status operator(pg_catalog.=) 'pending'
order by 1

-- name: dash_audit_start
insert into {{ s }}.audit_log (actor, action, target, matched)
values (%(actor)s, %(action)s, %(target)s, %(matched)s) returning id

-- name: ops_lock_batch
-- The jobs of one batch of an operator action (toolkit/ops/operate.py), locked for its
-- transaction, so what each is found to be stays so until the batch commits.
select id, status from {{ s }}.jobs where id operator(pg_catalog.=) any(%(ids)s)
order by id for update

-- name: ops_statuses
select id, status from {{ s }}.jobs where id operator(pg_catalog.=) any(%(ids)s)

-- name: dash_audit_progress
-- An action's running totals after each batch: changed, and left alone by reason.
update {{ s }}.audit_log set affected = affected operator(pg_catalog.+) %(n)s, skipped = %(skipped)s
where id operator(pg_catalog.=) %(id)s

-- name: dash_audit_finish
update {{ s }}.audit_log set finished_at = pg_catalog.now(),
    error = %(error)s where id operator(pg_catalog.=) %(id)s

-- name: dash_audit_get
select id, at, actor, action, target, matched, affected, skipped, finished_at, error
from {{ s }}.audit_log where id operator(pg_catalog.=) %(id)s

-- name: dash_audit_recent
select id, at, actor, action, target, matched, affected, skipped, finished_at, error
from {{ s }}.audit_log order by at desc limit %(limit)s

-- name: dash_cron_launcher
select exists (select 1 from pg_catalog.pg_stat_activity
               where backend_type operator(pg_catalog.=) 'pg_cron launcher') as running

-- name: dash_ratelimits
-- Each bucket with its tokens now (refilled at rate per second up to burst, as take_tokens does),
-- the types that take from it, and their snoozed attempts in the last hour.
select r.key, r.rate, r.burst,
       least(r.burst::pg_catalog.float8,
             r.tokens operator(pg_catalog.+) (r.rate operator(pg_catalog.*) extract(
                 epoch from pg_catalog.clock_timestamp() operator(pg_catalog.-) r.updated_at)::pg_catalog.float8))
           as tokens,
       r.updated_at,
       coalesce((select pg_catalog.array_agg(t.type order by t.type) from {{ s }}.job_types t
                 where t.rate_limit operator(pg_catalog.=) r.key), '{}'::pg_catalog.text[]) as types
from {{ s }}.rate_limits r order by r.key

-- name: dash_snoozes
-- Snoozed attempts (rate limits, 429 Retry-After) of the last hour per type.
select j.type, pg_catalog.count(*) as snoozed_1h, pg_catalog.max(a.finished_at) as last_at
from {{ s }}.job_attempts a join {{ s }}.jobs j on j.id operator(pg_catalog.=) a.job_id
where a.finished_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 hour')
    and a.outcome operator(pg_catalog.=) 'snoozed'
group by j.type order by j.type

-- name: dash_audit_schedule
insert into {{ s }}.audit_log (actor, action, target, matched, affected, finished_at)
values (%(actor)s, %(action)s, pg_catalog.jsonb_build_object('schedule', %(name)s::pg_catalog.text), 1, 1,
        pg_catalog.now())

-- name: dash_audit_pause
insert into {{ s }}.audit_log (actor, action, target, matched, affected, finished_at)
values (%(actor)s, %(action)s, pg_catalog.jsonb_build_object('type', %(type)s::pg_catalog.text,
                                                             'key', %(key)s::pg_catalog.text),
        1, %(changed)s, pg_catalog.now())

{#- Issue 27: the state bar and every filter's total. A count reads at most `bound` rows through the
    partial index of its state (count over a LIMITed subquery), so it costs the same at a million
    jobs as at a thousand; beyond the bound the page shows an estimate, labelled as one. #}
{% macro bounded_state(state, extra="", order="") -%}
(select pg_catalog.count(*) from (select 1 from {{ s }}.jobs
    where status operator(pg_catalog.=) '{{ state }}' {{ extra }}
      and (%(type)s::pg_catalog.text is null or type operator(pg_catalog.=) %(type)s)
    {{ order }} limit %(bound)s) b)
{%- endmacro %}

-- name: dash_state_counts
-- Jobs per state, all types or one, each counted up to `bound` rows (pass the bound plus one: a
-- count above the bound means "more than that"). Each state reads a partial index: pending
-- jobs_claim_idx, processing jobs_lease_idx (a processing job's lease is never null: a check says
-- so), completed jobs_finished_idx, failed jobs_failed_idx, and dead, cancelled, waiting and
-- blocked one range each of jobs_state_idx (0025). Completed and failed jobs are read newest first
-- (the order of jobs_finished_idx and jobs_failed_idx), else the planner may read the table until
-- the bound.
select {{ bounded_state('pending') }} as pending,
       {{ bounded_state('waiting') }} as waiting,
       {{ bounded_state('blocked') }} as blocked,
       {{ bounded_state('processing', 'and lease_expires_at is not null') }} as processing,
       {{ bounded_state('completed', order='order by completed_at desc') }} as completed,
       {{ bounded_state('failed', order='order by completed_at desc') }} as failed,
       {{ bounded_state('dead') }} as dead,
       {{ bounded_state('cancelled') }} as cancelled

-- name: dash_state_estimates
-- The planner's statistics, for counts beyond the bound only: the rows of jobs (pg_class.reltuples)
-- and each state's share, and the type's when one is asked for, from pg_stats' most common values.
select c.reltuples::pg_catalog.float8 as reltuples,
       (select pg_catalog.json_object_agg(v.val, v.freq)
          from pg_catalog.pg_stats st,
               rows from (pg_catalog.unnest(st.most_common_vals::pg_catalog.text::pg_catalog.text[]),
                          pg_catalog.unnest(st.most_common_freqs)) as v(val, freq)
         where st.schemaname operator(pg_catalog.=) %(schema)s
           and st.tablename operator(pg_catalog.=) 'jobs' and st.attname operator(pg_catalog.=) 'status')
           as status_freqs,
       (select v.freq
          from pg_catalog.pg_stats st,
               rows from (pg_catalog.unnest(st.most_common_vals::pg_catalog.text::pg_catalog.text[]),
                          pg_catalog.unnest(st.most_common_freqs)) as v(val, freq)
         where st.schemaname operator(pg_catalog.=) %(schema)s
           and st.tablename operator(pg_catalog.=) 'jobs' and st.attname operator(pg_catalog.=) 'type'
           and v.val operator(pg_catalog.=) %(type)s::pg_catalog.text) as type_freq
from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
where n.nspname operator(pg_catalog.=) %(schema)s and c.relname operator(pg_catalog.=) 'jobs'

-- name: dash_filter_count
-- How many jobs match the jobs page's filter, counted up to `bound` rows (pass the bound plus one).
select pg_catalog.count(*) as n
from (select 1 from {{ s }}.jobs where true {{ job_filter() }} limit %(bound)s) b

-- name: dash_filter_estimate
-- The planner's estimate of the rows matching the filter (EXPLAIN plans it with these values and
-- runs nothing), for totals beyond the bound only.
explain (format json) select 1 from {{ s }}.jobs where true {{ job_filter() }}

-- name: dash_types_recent
-- Of these types, the ones with a job running, pending due in the last day or later, or finished
-- in the last day (each through its state's index: jobs_claim_idx, jobs_lease_idx,
-- jobs_finished_idx, jobs_failed_idx); a type with none of them and no handler is called stale.
-- The last day's finished jobs are read once for all the candidates (a hashed subplan, the read
-- the overview's one-day chart makes), not once per candidate type.
select t.type from pg_catalog.unnest(%(types)s::pg_catalog.text[]) as t(type)
where exists (select 1 from {{ s }}.jobs j where j.status operator(pg_catalog.=) 'pending'
                  and j.type operator(pg_catalog.=) t.type
                  and j.scheduled_for operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 day'))
   or exists (select 1 from {{ s }}.jobs j where j.lease_expires_at is not null
                  and j.status operator(pg_catalog.=) 'processing' and j.type operator(pg_catalog.=) t.type)
   or t.type operator(pg_catalog.=) any (select j.type from {{ s }}.jobs j
                                              where j.status operator(pg_catalog.=) any ('{completed,dead,cancelled}')
                                                and j.completed_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 day'))
   or exists (select 1 from {{ s }}.jobs j where j.status operator(pg_catalog.=) 'failed'
                 and j.completed_at operator(pg_catalog.>) (pg_catalog.now() operator(pg_catalog.-) interval '1 day')
                 and j.type operator(pg_catalog.=) t.type)

-- name: dash_types_handled
-- Of these types, the ones jobkit knows a handler or a configuration for: a worker has served it
-- (known_types) or jobkit.toml configures it (job_types).
select t.type from pg_catalog.unnest(%(types)s::pg_catalog.text[]) as t(type)
where exists (select 1 from {{ s }}.known_types k where k.type operator(pg_catalog.=) t.type)
   or exists (select 1 from {{ s }}.job_types c where c.type operator(pg_catalog.=) t.type)

-- name: dash_audit_run_schedule
-- "Run now" of a schedule: which, the one-off cron job that runs it, and when it runs.
insert into {{ s }}.audit_log (actor, action, target, matched, affected, finished_at)
values (%(actor)s, 'run_schedule',
        pg_catalog.jsonb_build_object('schedule', %(name)s::pg_catalog.text,
                                      'cron_job', %(cron_job)s::pg_catalog.text,
                                      'runs_at', %(runs_at)s::pg_catalog.timestamptz),
        1, 1, pg_catalog.now())
returning id
