-- jobkit 0023: the same three checks on jobs in forms that cost less to enforce (issue 23). A CHECK
-- constraint's stored expression is read back from its text form (stringToNode) and prepared again
-- by every INSERT and UPDATE statement, so its cost per single-row enqueue grows with the size of
-- that text. `status in ('pending', ...)` is stored as an ARRAY[] of eight constants (1,764
-- characters); `status = any ('{pending,...}')` is one array constant (757). `x is null or
-- jsonb_typeof(x) = 'object'` drops its `is null or`: a CHECK whose expression is null passes, and
-- jsonb_typeof(null) is null, so exactly the same rows pass. Same names, same rows allowed, same
-- errors (23514). Swapped live-safely as 0018: added NOT VALID here, validated by deploy after the
-- migrations in a transaction of its own (SHARE UPDATE EXCLUSIVE: enqueue and claim go on).
-- squawk-ignore-file require-lock-timeout, require-statement-timeout
-- Each old check is replaced at once, in this transaction, by its equivalent (NOT VALID):
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.jobs drop constraint jobs_status_check;
alter table {{ s }}.jobs add constraint jobs_status_check
    check (status = any ('{pending,processing,completed,failed,dead,cancelled,waiting,blocked}'::text[]))
    not valid;
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.jobs drop constraint jobs_trace_context_object;
alter table {{ s }}.jobs add constraint jobs_trace_context_object
    check (pg_catalog.jsonb_typeof(trace_context) = 'object') not valid;
-- squawk-ignore ban-drop-constraint
alter table {{ s }}.jobs drop constraint jobs_progress_object;
alter table {{ s }}.jobs add constraint jobs_progress_object
    check (pg_catalog.jsonb_typeof(progress) = 'object') not valid;
