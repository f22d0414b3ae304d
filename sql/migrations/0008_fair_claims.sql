-- jobkit 0008: faster fair claims; debounced and throttled jobs carry the enqueuer's trace context.
--
-- The two concurrency-key indexes keep one entry per job (no B-tree deduplication).
-- Jobs enqueued together share (type, key, priority, scheduled_for), so deduplication packed a key's
-- jobs into posting lists; an index scan can mark an entry dead only when every job in its posting
-- list is gone, so each claim's per-key probe re-read every already-claimed job at the head of
-- its key from the heap until VACUUM ran (measured: the fair claim's key walk took twice as long
-- midway through a 100,000-job drain over 50 keys). One entry per job is killed on first sight.
-- Entries written before this migration stay packed until their jobs leave the index.
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.
alter index {{ s }}.jobs_key_claim_idx set (deduplicate_items = off);
alter index {{ s }}.jobs_key_running_idx set (deduplicate_items = off);

-- A fair claim walks each key once: the probe that finds a key also brings its first jobs, as many
-- as the batch needs per key, sized from how many keys the previous claim found (key_cursors.keys).
-- Before, a key with room for more than one job was probed twice (measured: 50 keys, batches of
-- 100: the walk and the second round of probes each took about as long as the other).
alter table {{ s }}.key_cursors add column keys int;
