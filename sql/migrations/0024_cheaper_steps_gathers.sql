-- jobkit 0024: cheaper durable steps and gathers (issue 25's benchmarks).
--
-- Durable steps' records without CHECK constraints (the cost per step). A
-- CHECK's stored expression is read back from its text (stringToNode) and prepared again by every
-- INSERT statement (0023): the four checks of job_steps cost each save_steps statement about as much
-- as the index insert of its rows. Only the functions of sql/functions write job_steps
-- (save_steps, the waits, replay_job), and they already refuse what the checks refused: save_steps
-- refuses a name outside 1 to 200 characters or an occurrence below 1 (22023, with a hint), writes
-- 'completed' or 'failed' only, and tries >= 1 (greatest(.., 1)); the waits and replays write
-- those values or copy rows that passed. As job_attempts and job_edges' jobs columns, the table
-- relies on its writers. Dropping a constraint is catalog-only (no scan, no rewrite).
-- squawk-ignore-file require-lock-timeout, require-statement-timeout, ban-drop-constraint
alter table {{ s }}.job_steps drop constraint if exists job_steps_name_check;
alter table {{ s }}.job_steps drop constraint if exists job_steps_occurrence_check;
alter table {{ s }}.job_steps drop constraint if exists job_steps_status_check;
alter table {{ s }}.job_steps drop constraint if exists job_steps_tries_check;

-- A gather's fan-in as a counter, not one job_edges row per gathered job: flows.fan_in names the
-- flow's callback job (the last of create_flow(p_fan_in => true)), after every job of its flow created
-- before it, each by a 'run' edge that is not stored. Its blocked_by counts them down as they end
-- (48_flows.sql). A 10,000-job gather wrote 10,000 edge rows and 20,000 index entries for it.
-- A new nullable column without a default: catalog-only.
alter table {{ s }}.flows add column if not exists fan_in uuid;
