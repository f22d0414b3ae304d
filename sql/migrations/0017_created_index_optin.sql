-- jobkit 0017: the dashboard's keyset index jobs_created_idx (0003) is opt-in (issue 23).
--
-- Every enqueue wrote an entry into it (+20% WAL per job, bench.index_cost), also in deployments
-- that never open the dashboard's jobs page. `jobkit deploy` now builds it (CONCURRENTLY, after the
-- migrations) only when jobkit.toml says `[dashboard] created_index = true`, as jobs_created_page_idx
-- (another name, since deploy runs the head migration's outside-transaction steps again on every
-- deploy); without it the jobs page's newest-first view sorts the table. A deployment that wants it
-- sees 0003's index dropped here and the new one built by the same deploy.

-- jobkit:outside-transaction
drop index concurrently if exists {{ s }}.jobs_created_idx;
