-- A job's life through the SQL API, run as service_role (what a worker or an Edge Function with the
-- service key uses): enqueue, claim, fenced completion and failure, snooze, heartbeat, dead-letter,
-- retry, cancel, rate-limited claims, stuck sweep, prune and wake-ups. Everything is rolled back.
begin;
set local client_min_messages = warning;
-- pgTAP lives in schema extensions (the Supabase CLI creates it there); create both when missing.
do $$
begin
    if to_regnamespace('extensions') is null then
        create schema extensions;
    end if;
end
$$;
create extension if not exists pgtap with schema extensions;
set local search_path = extensions, public;

-- pgTAP runs as service_role below: it needs USAGE on pgTAP's schema (Supabase grants it).
do $$
begin
    if not has_schema_privilege('service_role', 'extensions', 'usage') then
        grant usage on schema extensions to service_role;
    end if;
end
$$;

select plan(49);

set local role service_role;

-- Enqueue: two jobs due now (priorities 10 and 0) and one for later.
select lives_ok($$select jobkit.enqueue('pgtap_life', '{"n": 1}', 10, now(), 3, 'pgtap-1')$$,
    'service_role can enqueue (priority 10)');
select lives_ok($$select jobkit.enqueue('pgtap_life', '{"n": 2}', 0, now(), 3, 'pgtap-2')$$,
    'service_role can enqueue (priority 0)');
select lives_ok($$select jobkit.enqueue('pgtap_life', '{"n": 3}', 0, now() + interval '1 hour', 3, 'pgtap-3')$$,
    'service_role can enqueue a job for later');
select is(
    jobkit.enqueue('pgtap_life', '{"n": 99}', 0, now(), 3, 'pgtap-1'),
    (select id from jobkit.jobs where idempotency_key = 'pgtap-1'),
    'an idempotency key held by an unfinished job returns that job'
);
select results_eq(
    $$select payload ->> 'n', status, attempts, max_attempts from jobkit.jobs
      where type = 'pgtap_life' order by idempotency_key$$,
    $$values ('1', 'pending', 0, 3), ('2', 'pending', 0, 3), ('3', 'pending', 0, 3)$$,
    'three pending jobs, no attempt yet'
);
select throws_ok($$select jobkit.enqueue('', '{}')$$, '22023', null, 'an empty job type is refused');

-- Claim: only the due jobs, highest priority first, attempt 1, leased to the worker.
select results_eq(
    $$select payload ->> 'n', status, attempts, worker_id, lease_expires_at = now() + interval '2 minutes'
      from jobkit.pick_jobs('pgtap_life', 5, 'pgtap-worker', '2 minutes') order by priority desc$$,
    $$values ('1', 'processing', 1, 'pgtap-worker', true), ('2', 'processing', 1, 'pgtap-worker', true)$$,
    'pick_jobs claims the two due jobs in priority order (not the later one)'
);
select is_empty($$select * from jobkit.pick_jobs('pgtap_life', 5, 'pgtap-other', '1 minute')$$,
    'a second claim finds nothing: no job is handed out twice');

-- complete_job is fenced on the attempt.
select is(jobkit.complete_job((select id from jobkit.jobs where idempotency_key = 'pgtap-1'), 2, '{"ok": true}'),
    false, 'complete_job with a wrong attempt returns false');
select is((select status from jobkit.jobs where idempotency_key = 'pgtap-1'), 'processing',
    'and leaves the job processing');
select is(jobkit.complete_job((select id from jobkit.jobs where idempotency_key = 'pgtap-1'), 1, '{"ok": true}'),
    true, 'complete_job with the claimed attempt returns true');
select results_eq(
    $$select status, result, lease_expires_at is null, completed_at is not null
      from jobkit.jobs where idempotency_key = 'pgtap-1'$$,
    $$values ('completed', '{"ok": true}'::jsonb, true, true)$$,
    'the job is completed with its result'
);
select is(jobkit.complete_job((select id from jobkit.jobs where idempotency_key = 'pgtap-1'), 1, '{}'),
    false, 'a second completion is refused');
select results_eq(
    $$select a.attempt, a.outcome, a.worker_id from jobkit.job_history a
      join jobkit.jobs j on j.id = a.job_id where j.idempotency_key = 'pgtap-1'$$,
    $$values (1, 'completed', 'pgtap-worker')$$,
    'the attempt is in the history'
);
select is_empty(
    $$select 1 from jobkit.job_attempts a join jobkit.jobs j on j.id = a.job_id
      where j.idempotency_key = 'pgtap-1'$$,
    'a completing attempt is recorded on the job row only'
);

-- fail_job with attempts left schedules a retry; it is fenced too.
select is(jobkit.fail_job((select id from jobkit.jobs where idempotency_key = 'pgtap-2'), 1, 'boom'),
    'pending', 'fail_job with attempts left returns pending');
select results_eq(
    $$select status, last_error, scheduled_for > now(), lease_expires_at is null
      from jobkit.jobs where idempotency_key = 'pgtap-2'$$,
    $$values ('pending', 'boom', true, true)$$,
    'the retry waits for its backoff and keeps the error'
);
select is(jobkit.fail_job((select id from jobkit.jobs where idempotency_key = 'pgtap-2'), 1, 'late'),
    null::text, 'fail_job for an attempt that no longer holds the job returns null');
select is(jobkit.fail_job((select id from jobkit.jobs where idempotency_key = 'pgtap-2'), 1, 'x', null, true),
    null::text, 'even a permanent failure is fenced');

-- One attempt only: heartbeat, snooze (keeps the attempt), fail, dead-letter, retry, cancel.
select lives_ok($$select jobkit.enqueue('pgtap_once', '{}', 0, now(), 1, 'pgtap-4')$$,
    'enqueue a job with max_attempts 1');
select results_eq(
    $$select attempts, worker_id, lease_expires_at = now() + (jobkit.type_settings(type)).lease
      from jobkit.pick_job('pgtap_once')$$,
    $$values (1, 'pick_job', true)$$,
    'pick_job claims one job with the type''s configured lease'
);
select is(jobkit.extend_lease((select id from jobkit.jobs where idempotency_key = 'pgtap-4'), 1, '10 minutes'),
    now() + interval '10 minutes', 'extend_lease returns the new deadline');
select is(jobkit.extend_lease((select id from jobkit.jobs where idempotency_key = 'pgtap-4'), 2, '10 minutes'),
    null::timestamptz, 'extend_lease for a wrong attempt returns null');
select is(jobkit.snooze_job((select id from jobkit.jobs where idempotency_key = 'pgtap-4'), 1, '0 seconds'),
    true, 'snooze_job returns true');
select results_eq(
    $$select status, attempts from jobkit.jobs where idempotency_key = 'pgtap-4'$$,
    $$values ('pending', 0)$$,
    'a snoozed job is pending again without consuming its attempt'
);
select is((select attempts from jobkit.pick_job('pgtap_once')), 1, 'claimed again as attempt 1');
select is(jobkit.fail_job((select id from jobkit.jobs where idempotency_key = 'pgtap-4'), 1, 'fatal'),
    'failed', 'fail_job on the last attempt returns failed');
select cmp_ok(jobkit.sweep_dead(), '>=', 1::bigint, 'sweep_dead moves failed jobs on');
select is((select status from jobkit.jobs where idempotency_key = 'pgtap-4'), 'dead', 'the job is dead');
select is(jobkit.retry_job((select id from jobkit.jobs where idempotency_key = 'pgtap-4')), true,
    'retry_job revives a dead job');
select results_eq(
    $$select status, round_start = attempts, max_attempts
      from jobkit.jobs where idempotency_key = 'pgtap-4'$$,
    $$values ('pending', true, 1)$$,
    'pending again with a fresh round of the job''s own max_attempts'
);
select is(jobkit.cancel_job((select id from jobkit.jobs where idempotency_key = 'pgtap-4')), true,
    'cancel_job cancels a pending job');
select is(jobkit.cancel_job((select id from jobkit.jobs where idempotency_key = 'pgtap-4')), false,
    'cancelling twice returns false');

-- Batches: enqueue_many, claim_jobs under a rate limit, complete_jobs.
select results_eq(
    $$select ord from jobkit.enqueue_many(array['pgtap_many', 'pgtap_many', 'pgtap_many'],
                                          array['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[])$$,
    $$values (1::bigint), (2::bigint), (3::bigint)$$,
    'enqueue_many returns one id per input, in order'
);
insert into jobkit.rate_limits (key, rate, burst, tokens) values ('pgtap-limit', 0.001, 2, 2);
select is(
    (select count(*) from jobkit.claim_jobs('pgtap_many', 10, 'pgtap-worker', '1 minute', 'pgtap-limit')),
    2::bigint, 'claim_jobs claims no more jobs than the rate limit has tokens for'
);
select is(
    (select count(*) from jobkit.claim_jobs('pgtap_many', 10, 'pgtap-worker', '1 minute', 'pgtap-limit')),
    0::bigint, 'an empty bucket claims nothing'
);
select is(
    (select count(*) from jobkit.complete_jobs(
        array(select id from jobkit.jobs where type = 'pgtap_many' and status = 'processing' order by id),
        array[1, 1], array['{}', '{}']::jsonb[])),
    2::bigint, 'complete_jobs accepts both claimed jobs'
);
select is(
    (select count(*) from jobkit.complete_jobs(
        array(select id from jobkit.jobs where type = 'pgtap_many' and status = 'pending'),
        array[1], array['{}']::jsonb[])),
    0::bigint, 'complete_jobs refuses a job that was never claimed'
);

-- The stuck sweep: an expired lease goes back to pending with backoff.
select is((select count(*) from jobkit.pick_jobs('pgtap_many', 1, 'pgtap-crashed', '1 minute')), 1::bigint,
    'a worker claims the last job');
update jobkit.jobs set lease_expires_at = now() - interval '1 second'
where type = 'pgtap_many' and status = 'processing';
select results_eq(
    $$select s.status from jobkit.sweep_stuck() s join jobkit.jobs j on j.id = s.id
      where j.type = 'pgtap_many'$$,
    $$values ('pending')$$,
    'sweep_stuck puts the expired job back to pending'
);
select is(
    (select outcome from jobkit.job_attempts a join jobkit.jobs j on j.id = a.job_id
     where j.type = 'pgtap_many' and a.worker_id = 'pgtap-crashed'),
    'lease_expired', 'and records the lost attempt'
);

-- Prune: finished jobs older than the retention go, with their history.
update jobkit.jobs set completed_at = now() - interval '2 days' where idempotency_key = 'pgtap-1';
select cmp_ok(jobkit.prune('1 day'), '>=', 1::bigint, 'prune deletes finished jobs older than a day');
select is_empty($$select 1 from jobkit.jobs where idempotency_key = 'pgtap-1'$$, 'the job is gone');

-- Wake-ups (NOTIFY transport for the test; a deployed project may use pg_net).
update jobkit.settings set value = '"notify"' where key = 'transport';
select is(jobkit.wake('pgtap_nothing_due'), 0, 'wake makes no call for a type without due jobs');
select is(jobkit.wake('pgtap_life'), 0, 'nor for jobs that are not due yet');
select lives_ok($$select jobkit.enqueue('pgtap_wake', '{}')$$, 'enqueue a job due now');
select is(jobkit.wake('pgtap_wake'), 1, 'wake notifies the workers of a type with due jobs');
select is(
    (select count(*) from jobkit.wakeups where type = 'pgtap_wake' and transport = 'notify'),
    0::bigint, 'NOTIFY wake-ups have no answer to reconcile and are not recorded'
);
select lives_ok($$select jobkit.wake_all()$$, 'wake_all runs');

reset role;

select * from finish();
rollback;
