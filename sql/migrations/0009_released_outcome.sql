-- jobkit 0009: a job handed back by a stopping worker is recorded as 'released', no longer as
-- 'snoozed': the dashboard's rate-limit page counted those releases as rate-limit snoozes (of
-- types with no rate limit). Past releases are relabelled; the check is swapped live-safely: added
-- NOT VALID here, validated by deploy after the migrations in a transaction of its own (SHARE UPDATE
-- EXCLUSIVE: attempts go on being recorded while job_attempts is checked).
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.
alter table {{ s }}.job_attempts drop constraint job_attempts_outcome_check;
alter table {{ s }}.job_attempts add constraint job_attempts_outcome_check
    check (outcome in ('completed', 'retry', 'failed', 'snoozed', 'released', 'lease_expired', 'cancelled'))
    not valid;

-- jobkit:outside-transaction
-- Relabelled in batches, each its own short transaction, once the new check allows 'released'.
update {{ s }}.job_attempts set outcome = 'released'
where ctid operator(pg_catalog.=) any (array(
    select a.ctid from {{ s }}.job_attempts a
    where a.outcome operator(pg_catalog.=) 'snoozed' and a.error operator(pg_catalog.=) 'released by a stopping worker'
    limit %(batch)s));
