-- jobkit bootstrap: the schema and the migration history table.
-- Runs before every migration, in the same transaction, so a failed first migration leaves nothing.
-- Names below resolve in pg_catalog whatever the deploying session's search_path (objects planted
-- in public are never bound into a default, a constraint or a policy); for this transaction only.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
create schema if not exists {{ s }};
revoke all on schema {{ s }} from public;

create table if not exists {{ s }}.schema_migrations (
    version    text primary key,
    name       text not null,
    checksum   text not null,
    applied_at timestamptz not null default now()
);
alter table {{ s }}.schema_migrations enable row level security;
revoke all on {{ s }}.schema_migrations from public;
