-- jobkit 0026: the row triggers' inbox (issue 24's cost targets). A declared row trigger no longer
-- inserts jobs inside the transaction that changed the row: it writes one narrow row per changed row
-- here (logged, no index: a heap insert), and the rows become jobs off that transaction, in one
-- set-based move (move_row_inbox, sql/functions/72_row_inbox.sql) that the claim of the type and the
-- stuck sweep run. A job row with its three index entries cost 2.8 times the whole app insert
-- (docs/BENCHMARKS.md, issue 24). The move finds rows by a scan: the table holds only what no
-- claim or sweep has moved yet.
-- A new, empty table: nothing waits on it.
-- squawk-ignore-file require-lock-timeout, require-statement-timeout
create table if not exists {{ s }}.row_inbox (
    name      text not null,  -- the declared trigger ([triggers.<name>])
    op        text not null,  -- its operation: insert, update or delete
    type      text not null,  -- the job type it makes
    staged    json not null,  -- the declared payload's and the primary key's columns, {"column": value, ...}
                              -- (json: cheaper to build per row than jsonb; the move takes them apart)
    staged_at timestamptz not null default now()  -- the changing transaction's start: the job's created_at
) with (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000);

alter table {{ s }}.row_inbox enable row level security;
