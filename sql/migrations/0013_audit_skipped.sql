-- jobkit 0013: an operator action's audit row counts the jobs it left alone, by reason.
--
-- The CLI and the dashboard act through one operator API (toolkit/ops/operate.py): a job that
-- was selected but not changed (its state no longer allows it, it is gone, or its idempotency key
-- is held by a newer unfinished job) is counted on the audit row beside the jobs it changed,
-- e.g. {"not found": 2}. A constant default: no table rewrite.
alter table {{ s }}.audit_log add column skipped jsonb not null default '{}'::jsonb;
