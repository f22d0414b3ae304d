-- jobkit 0007: a job may belong to one of the app's users (Supabase auth.users.id). Set only by
-- the per-user API ([user_api] in jobkit.toml, sql/user_api.sql) from the caller's JWT, never by
-- the caller; null for every other job, so the partial index costs the other jobs nothing.
alter table {{ s }}.jobs add column owner uuid;

-- jobkit:outside-transaction
create index concurrently if not exists jobs_owner_idx on {{ s }}.jobs (owner, created_at)
    where owner is not null;
