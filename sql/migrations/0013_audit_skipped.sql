-- jobkit 0013: an operator action's audit row counts the jobs it left alone, by reason.
--
-- The CLI and the dashboard act through one operator API (toolkit/ops/operate.py): a job that
-- was selected but not changed (its state no longer allows it, it is gone, or its idempotency key
-- is held by a newer unfinished job) is counted on the audit row beside the jobs it changed,
-- e.g. {"not found": 2}. A constant default: no table rewrite, a catalog-only change on
-- audit_log (not jobs). deploy sets lock_timeout before each migration (--lock-timeout), so the
-- migration does not set its own.
-- squawk-ignore require-lock-timeout, require-statement-timeout
alter table {{ s }}.audit_log add column if not exists skipped jsonb not null default '{}'::jsonb;
