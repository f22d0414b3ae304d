-- jobkit 0025: five partial indexes on jobs become two, and two checks get a shorter form (issue 23).
--
-- Every partial index's predicate is prepared by every insert and non-HOT update statement and
-- evaluated for every row it writes (each claim and completion), whether or not the row belongs in
-- it. Five (jobs_dead_idx, jobs_parked_idx, jobs_cancelled_idx from 0003/0022, jobs_flow_idx and
-- jobs_blocked_idx from 0020) become two, which answer the same reads (bench.callgrind: about
-- 1,100 instructions fewer a claimed and completed job):
-- - jobs_state_idx (status, type), only dead, cancelled, waiting and blocked rows: the dashboard's
--   state bar and overview (per state, per type), the sweep's blocked jobs (_sweep_blocked) and
--   the waits' overdue ones; status first, so one state is one range of it;
-- - jobs_flow_state_idx (flow_id, status), only jobs of a flow: a flow's jobs, and its blocked or
--   pending ones.
-- The new ones are built CONCURRENTLY before the old ones are dropped CONCURRENTLY, so writers go
-- on and no read is left without an index in between.
--
-- And two checks in a shorter form, as 0023 did for three others: a CHECK's stored expression is
-- read back from its text and prepared again by every INSERT and UPDATE statement, about 28
-- instructions a character. `jsonb_typeof(x) = 'object'` (551 characters stored) becomes
-- `x @> '{}'` (392): only an object contains the empty object (an array, a scalar or JSON null
-- does not), and null passes both. Same names, same rows allowed, same error (23514); added NOT
-- VALID here, validated by deploy after the migrations. A single enqueue: -11,000 instructions.
-- squawk-ignore-file require-lock-timeout, require-statement-timeout
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.jobs drop constraint jobs_trace_context_object;
alter table {{ s }}.jobs add constraint jobs_trace_context_object
    check (trace_context operator(pg_catalog.@>) '{}'::jsonb) not valid;
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.jobs drop constraint jobs_progress_object;
alter table {{ s }}.jobs add constraint jobs_progress_object
    check (progress operator(pg_catalog.@>) '{}'::jsonb) not valid;

-- jobkit:outside-transaction
create index concurrently if not exists jobs_state_idx on {{ s }}.jobs (status, type)
    where status operator(pg_catalog.=) any ('{dead,cancelled,waiting,blocked}');
create index concurrently if not exists jobs_flow_state_idx on {{ s }}.jobs (flow_id, status)
    where flow_id is not null;
drop index concurrently if exists {{ s }}.jobs_dead_idx;
drop index concurrently if exists {{ s }}.jobs_parked_idx;
drop index concurrently if exists {{ s }}.jobs_cancelled_idx;
drop index concurrently if exists {{ s }}.jobs_flow_idx;
drop index concurrently if exists {{ s }}.jobs_blocked_idx;
