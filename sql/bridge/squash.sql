-- Upgrade bridge, last step for every deployment made before the squash (e0ca19e): the database
-- now holds what the last pre-squash layout built (main at 3118562..57b8576), which is what
-- 0001_baseline builds except for two things no data depends on:
-- - the comment on jobs, which names where the states are described;
-- - the order of jobs' columns handler_max_attempts and round_start (added last before the squash,
--   placed after max_attempts by the baseline). Column order changes only by rewriting the table,
--   which a live upgrade must not do; no jobkit statement reads jobs' columns by position.
-- The history rows are rewritten after this step (deploy.py): the old rows give way to 0001's.
comment on table {{ s }}.jobs is 'jobkit jobs: one row per job; see the state notes in sql/schema.sql.';
