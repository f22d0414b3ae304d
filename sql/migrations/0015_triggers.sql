-- jobkit 0015: declared row triggers (issue 24): [triggers.<name>] in jobkit.toml makes a row change
-- on an app table a job, enqueued in the same transaction by a statement-level trigger.
--
-- jobs.source: where a job made by a trigger came from, {"trigger", "table", "op", "pk"}; null for
-- every other job. A column of its own rather than a payload field: the payload is the handler's
-- (payload = "row" is the whole row, whose columns may have any name), and `jobkit triggers list`
-- counts a trigger's jobs by it. Nullable with no default: a catalog-only change, no table rewrite.
--
-- row_triggers: the triggers deploy manages, one row per trigger and operation, with the sha256 of
-- the SQL that made them and the md5 of their definitions as PostgreSQL prints them afterwards.
-- Kept here, not in a comment on the trigger: on a table jobkit does not own (Supabase's
-- auth.users, TRIGGER granted) a role may create a trigger but not comment on, replace or drop it.
-- squawk-ignore require-lock-timeout, require-statement-timeout
alter table {{ s }}.jobs add column if not exists source jsonb;

create table if not exists {{ s }}.row_triggers (
    name          text not null,
    op            text not null check (op in ('insert', 'update', 'delete')),
    table_name    text not null,  -- schema.table as declared
    trigger_name  text not null,  -- on the table; prefixed with jobkit's schema
    function_name text not null,  -- in jobkit's schema
    spec          jsonb not null, -- the declaration: table, on, when, type, payload, idempotency
    checksum      text not null,  -- sha256 of the rendered SQL
    definition    text not null,  -- md5 of the trigger's and the function's definitions after deploy
    deployed_at   timestamptz not null default now(),
    primary key (name, op)
);

alter table {{ s }}.row_triggers enable row level security;
