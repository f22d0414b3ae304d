-- jobkit 0018: two job states for workflows (issue 25). 'waiting': a durable job that called
-- ctx.sleep / ctx.wait_for_event / ctx.wait_for_jobs; its attempt ended without being consumed and
-- it becomes due again at its wake time or when what it waits for arrives. 'blocked': a job of a
-- graph (jobkit.flow) whose parents have not all finished. Neither is claimable: the claim reads
-- only 'pending'. The check is swapped live-safely: added NOT VALID here, validated by deploy after
-- the migrations in a transaction of its own (SHARE UPDATE EXCLUSIVE: enqueue and claim go on).
-- squawk-ignore-file require-lock-timeout, require-statement-timeout
-- The old check is replaced at once, in this transaction, by a wider one (NOT VALID):
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.jobs drop constraint jobs_status_check;
alter table {{ s }}.jobs add constraint jobs_status_check
    check (status in ('pending', 'processing', 'completed', 'failed', 'dead', 'cancelled', 'waiting', 'blocked'))
    not valid;
