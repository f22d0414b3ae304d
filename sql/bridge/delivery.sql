-- Upgrade bridge, step for a deployment of 0001_core..0004_hot_path (main at ede9fd6): what the
-- last 0005_delivery before the squash did (main at 3118562..57b8576), so that the database then
-- holds what that layout built. Live-safe: the two new check constraints on jobs are added NOT VALID
-- (no scan under the ACCESS EXCLUSIVE lock); deploy validates them in a transaction of their own
-- (sql/bridge/validate.sql). Everything else is this step's old text, unchanged.
--
-- ---- One rule for max_attempts ------------------------------------------------------------------
-- A job's attempt limit is the first of: its own max_attempts as enqueued, the max_attempts of the
-- handler that last claimed it (handler_max_attempts, written by the claim), its type's setting,
-- the defaults row. retry_job starts a fresh round: round_start records the attempts used before
-- it, and a job is out of attempts when attempts - round_start reaches the limit.
alter table {{ s }}.jobs alter column max_attempts drop not null;
alter table {{ s }}.jobs alter column max_attempts drop default;
alter table {{ s }}.jobs add column handler_max_attempts int;
alter table {{ s }}.jobs add column round_start int not null default 0;
alter table {{ s }}.jobs add constraint jobs_handler_max_attempts_check
    check (handler_max_attempts >= 1) not valid;
alter table {{ s }}.jobs add constraint jobs_round_start_check check (round_start >= 0) not valid;

-- Leases below 5 seconds expire between heartbeats (one a second, at a third of the lease).
alter table {{ s }}.job_types drop constraint job_types_lease_check;
update {{ s }}.job_types set lease = interval '5 seconds' where lease < interval '5 seconds';
alter table {{ s }}.job_types add constraint job_types_lease_check check (lease >= interval '5 seconds');

-- ---- Waking: one wake-up per type per transaction, due-time hints, signed requests ----------------
-- The worker's signing secret replaces the bearer token: wake-ups carry
-- X-Jobkit-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">, so a request read from
-- pg_net's queue (readable by every role) cannot be used to call the worker after a short window.
insert into {{ s }}.settings (key, value) values ('secret_previous_until', 'null')
on conflict (key) do nothing;

-- A bearer token stored by an earlier jobkit becomes the signing secret (renamed where it is: in
-- Vault when the token is there, else in jobkit's table).
do $migrate$
declare
    v_prefix constant text := {{ schema | literal }} || '_';
begin
    if pg_catalog.to_regclass('vault.secrets') is not null then
        execute 'update vault.secrets set name = $1 || ''worker_secret'' where name = $1 || ''worker_token''
                 and not exists (select 1 from vault.secrets v where v.name = $1 || ''worker_secret'')'
            using v_prefix;
    end if;
    update {{ s }}.secrets set name = 'worker_secret' where name = 'worker_token'
        and not exists (select 1 from {{ s }}.secrets w where w.name = 'worker_secret');
    delete from {{ s }}.secrets where name = 'worker_token';
end
$migrate$;
