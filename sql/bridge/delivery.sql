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

-- The attempt limit of a job (see above); p_type_max is its type's setting.
create function {{ s }}.attempt_limit(p_job_max int, p_handler_max int, p_type_max int) returns int
language sql immutable set search_path = '' as $$
    select coalesce(p_job_max, p_handler_max, p_type_max, 3)
$$;

-- ---- Enqueue: max_attempts as given (null = decided when the job runs) --------------------------
create or replace function {{ s }}.enqueue(
    p_type text,
    p_payload jsonb,
    p_priority int default 0,
    p_run_at timestamptz default now(),
    p_max_attempts int default null,
    p_idempotency_key text default null
) returns uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_id uuid;
begin
    if p_type is null or p_type = '' then
        raise exception 'jobkit.enqueue: p_type must be a non-empty job type' using errcode = '22023';
    end if;
    if p_payload is null then
        raise exception 'jobkit.enqueue: p_payload must not be null (use ''{}''::jsonb)' using errcode = '22023';
    end if;
    if p_idempotency_key is null then  -- nothing to conflict on: a plain insert
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts)
        returning id into v_id;
        return v_id;
    end if;
    loop
        insert into {{ s }}.jobs (type, payload, priority, scheduled_for, max_attempts, idempotency_key)
        values (p_type, p_payload, coalesce(p_priority, 0), coalesce(p_run_at, now()), p_max_attempts,
                p_idempotency_key)
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
        returning id into v_id;
        if v_id is not null then
            return v_id;
        end if;
        select j.id into v_id from {{ s }}.jobs j
        where j.type = p_type and j.idempotency_key = p_idempotency_key
          and j.status in ('pending', 'processing');
        if v_id is not null then
            return v_id;
        end if;
        -- The holder of the key finished between our insert and our look-up: insert again.
    end loop;
end
$$;

create or replace function {{ s }}.enqueue_many(
    p_type text[],
    p_payload jsonb[],
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null
) returns table (ord bigint, id uuid)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    if cardinality(p_type) is distinct from cardinality(p_payload) then
        raise exception 'jobkit.enqueue_many: p_type and p_payload must have the same length'
            using errcode = '22023';
    end if;
    if array_position(p_type, null) is not null or array_position(p_payload, null) is not null
       or array_position(p_type, '') is not null then
        raise exception 'jobkit.enqueue_many: job types and payloads must be non-empty and not null'
            using errcode = '22023';
    end if;
    with input as materialized (
        select u.ord, gen_random_uuid() as new_id, u.type, u.payload,
               coalesce(p_priority[u.ord], 0) as priority,
               coalesce(p_run_at[u.ord], now()) as run_at,
               p_max_attempts[u.ord] as max_attempts,
               p_idempotency_key[u.ord] as key
        from unnest(p_type, p_payload) with ordinality as u(type, payload, ord)
    ), inserted as (
        insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts, idempotency_key)
        select i.new_id, i.type, i.payload, i.priority, i.run_at, i.max_attempts, i.key
        from input i order by i.ord
        on conflict (type, idempotency_key)
            where idempotency_key is not null and status in ('pending', 'processing')
            do nothing
        returning jobs.id, jobs.type, jobs.idempotency_key
    )
    select array_agg(coalesce(x.id, y.id, e.id) order by i.ord) into v_ids
    from input i
    left join inserted x on x.id = i.new_id
    left join inserted y on i.key is not null and y.type = i.type and y.idempotency_key = i.key
    left join lateral (
        select j.id from {{ s }}.jobs j
        where i.key is not null and j.type = i.type and j.idempotency_key = i.key
          and j.status in ('pending', 'processing')
    ) e on true;
    -- A key held by a transaction that committed after this statement's snapshot: resolve it anew.
    for k in 1 .. coalesce(cardinality(v_ids), 0) loop
        if v_ids[k] is null then
            v_ids[k] := {{ s }}.enqueue(p_type[k], p_payload[k], p_priority[k], p_run_at[k],
                                        p_max_attempts[k], p_idempotency_key[k]);
        end if;
    end loop;
    return query select u.ord, u.id from unnest(v_ids) with ordinality as u(id, ord);
end
$$;

create or replace function {{ s }}.enqueue_json(
    p_types jsonb,
    p_payloads jsonb,
    p_priority int[] default null,
    p_run_at timestamptz[] default null,
    p_max_attempts int[] default null,
    p_idempotency_key text[] default null
) returns setof uuid
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_one text;
begin
    if jsonb_typeof(p_payloads) is distinct from 'array' or jsonb_typeof(p_types) not in ('array', 'string') then
        raise exception 'jobkit.enqueue_json: p_payloads must be a JSON array, p_types a JSON array or string'
            using errcode = '22023';
    end if;
    if jsonb_typeof(p_types) = 'array' and jsonb_array_length(p_types) <> jsonb_array_length(p_payloads) then
        raise exception 'jobkit.enqueue_json: p_types and p_payloads must have the same length'
            using errcode = '22023';
    end if;
    if p_idempotency_key is not null and cardinality(array_remove(p_idempotency_key, null)) > 0 then
        return query select e.id from {{ s }}.enqueue_many(
            case when jsonb_typeof(p_types) = 'string'
                 then array_fill(p_types #>> '{}', array[jsonb_array_length(p_payloads)])
                 else array(select jsonb_array_elements_text(p_types)) end,
            array(select jsonb_array_elements(p_payloads)),
            p_priority, p_run_at, p_max_attempts, p_idempotency_key) e
        order by e.ord;
        return;
    end if;
    -- Ids are drawn first, so they come back in input order whatever order the insert runs in.
    v_ids := array(select gen_random_uuid() from generate_series(1, jsonb_array_length(p_payloads)));
    v_one := case when jsonb_typeof(p_types) = 'string' then p_types #>> '{}' end;
    insert into {{ s }}.jobs (id, type, payload, priority, scheduled_for, max_attempts)
    select v_ids[e.n], coalesce(v_one, p_types ->> (e.n - 1)::int), e.v, coalesce(p_priority[e.n], 0),
           coalesce(p_run_at[e.n], now()), p_max_attempts[e.n]
    from jsonb_array_elements(p_payloads) with ordinality as e(v, n);
    return query select u.id from unnest(v_ids) as u(id);
end
$$;

-- ---- The claim -------------------------------------------------------------------------------------
-- Claim up to p_limit due jobs of one type for p_worker, for p_lease (at least 5 seconds), never more
-- than the rate limit's tokens allow (p_rate_key, else the type's rate_limit). p_max_attempts is the
-- claiming handler's own max_attempts (null: none). Returns what a handler needs, in priority order;
-- max_attempts is the number of this round's last attempt (round_start + the attempt limit), so
-- attempts = max_attempts means "the last try".
drop function {{ s }}.pick_job(text);
drop function {{ s }}.pick_jobs(text, int, text, interval);
drop function {{ s }}.claim_jobs(text, int, text, interval, text);

create function {{ s }}.claim_jobs(
    p_type text, p_limit int, p_worker text, p_lease interval, p_rate_key text default null,
    p_max_attempts int default null
) returns table (id uuid, type text, attempts int, max_attempts int, priority int, payload jsonb,
                 idempotency_key text)
language plpgsql volatile set search_path = '' as $$
#variable_conflict use_column
declare
    v_key text;
    v_type_max int;
    v_limit int := greatest(p_limit, 0);
    v_claimed int;
begin
    if p_lease is null or p_lease < interval '5 seconds' then
        raise exception 'jobkit.claim_jobs: p_lease must be at least 5 seconds' using errcode = '22023';
    end if;
    select t.rate_limit, t.max_attempts into v_key, v_type_max from {{ s }}.job_types t
    where t.type in (p_type, '*') order by t.type = '*' limit 1;
    v_key := coalesce(p_rate_key, v_key);
    if v_key is not null then
        -- Take tokens only for jobs that exist: count the due ones first (cheap, bounded by p_limit).
        select count(*) into v_claimed from (
            select 1 from {{ s }}.jobs j
            where j.type = p_type and j.status = 'pending' and j.scheduled_for <= now() limit v_limit
        ) due;
        v_limit := {{ s }}.take_tokens(v_key, v_claimed);
        if v_limit = 0 then
            return;
        end if;
    end if;
    return query
    with claimed as (
        update {{ s }}.jobs j
        set status = 'processing', attempts = j.attempts + 1, started_at = now(),
            lease_expires_at = now() + p_lease, worker_id = p_worker,
            handler_max_attempts = p_max_attempts, updated_at = now()
        where j.id = any (array(
            select c.id from {{ s }}.jobs c
            where c.type = p_type and c.status = 'pending' and c.scheduled_for <= now()
            order by c.priority desc, c.scheduled_for
            limit v_limit
            for update skip locked
        ))
        returning j.id, j.type, j.attempts,
                  j.round_start + {{ s }}.attempt_limit(j.max_attempts, p_max_attempts, v_type_max) as cap,
                  j.priority, j.payload, j.idempotency_key, j.scheduled_for
    )
    select c.id, c.type, c.attempts, c.cap, c.priority, c.payload, c.idempotency_key
    from claimed c order by c.priority desc, c.scheduled_for;
    if v_key is not null then
        get diagnostics v_claimed = row_count;
        perform {{ s }}.return_tokens(v_key, v_limit - v_claimed);
    end if;
end
$$;

-- The seed's signatures, over claim_jobs: whole rows, as claimed.
create function {{ s }}.pick_jobs(p_type text, p_limit int, p_worker text, p_lease interval)
returns setof {{ s }}.jobs
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
begin
    v_ids := array(select c.id from {{ s }}.claim_jobs(p_type, p_limit, p_worker, p_lease) c);
    return query select j.* from {{ s }}.jobs j where j.id = any (v_ids)
                 order by j.priority desc, j.scheduled_for;
end
$$;

create function {{ s }}.pick_job(p_type text) returns setof {{ s }}.jobs
language sql volatile set search_path = '' as $$
    select * from {{ s }}.pick_jobs(p_type, 1, 'pick_job', ({{ s }}.type_settings(p_type)).lease)
$$;

-- ---- Failures and expired leases: the attempt limit as above -------------------------------------
drop function {{ s }}.fail_job(uuid, int, text, interval, boolean);
drop function {{ s }}.fail_jobs(uuid[], int[], text[], interval[], boolean[], int[]);

-- Record failed attempts. Each job goes back to pending after p_retry_in (default: the type's
-- backoff, never less than 1 s) while its round has attempts left and the failure is not
-- permanent, else to failed. Returns (id, new status) for the jobs the attempt still held (fenced).
create function {{ s }}.fail_jobs(
    p_ids uuid[], p_attempts int[], p_errors text[],
    p_retry_in interval[] default null, p_permanent boolean[] default null
) returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
#variable_conflict use_column
begin
    return query
    with input as (
        select u.id, u.attempt, u.error, p_retry_in[u.ord] as retry_in,
               not coalesce(p_permanent[u.ord], false) as may_retry
        from unnest(p_ids, p_attempts, p_errors) with ordinality as u(id, attempt, error, ord)
    ), decided as (
        select i.*, i.may_retry and j.attempts - j.round_start < {{ s }}.attempt_limit(
                   j.max_attempts, j.handler_max_attempts, coalesce(t.max_attempts, d.max_attempts)) as again
        from input i
        join {{ s }}.jobs j on j.id = i.id
        cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
        left join {{ s }}.job_types t on t.type = j.type
    ), changed as (
        update {{ s }}.jobs j
        set status = case when i.again then 'pending' else 'failed' end,
            scheduled_for = case when i.again
                then now() + greatest(coalesce(i.retry_in, {{ s }}.backoff(j.type, j.attempts - j.round_start)),
                                      interval '1 second')
                else j.scheduled_for end,
            completed_at = case when i.again then null else now() end,
            last_error = i.error, lease_expires_at = null, updated_at = now()
        from decided i
        where j.id = any (p_ids) and j.id = i.id and j.status = 'processing' and j.attempts = i.attempt
        returning j.id, j.status, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at,
               case when c.status = 'pending' then 'retry' else 'failed' end, c.last_error
        from changed c
    )
    select c.id, c.status from changed c;
end
$$;

create function {{ s }}.fail_job(
    p_id uuid, p_attempt int, p_error text,
    p_retry_in interval default null, p_permanent boolean default false
) returns text
language sql volatile set search_path = '' as $$
    select f.status from {{ s }}.fail_jobs(array[p_id], array[p_attempt], array[p_error],
                                           array[p_retry_in], array[p_permanent]) f
$$;

-- Processing jobs whose lease expired: back to pending with backoff while the round has attempts
-- left, else failed. Every such job reaches a state. The worker is told when the retries are due.
drop function {{ s }}.sweep_stuck();
create function {{ s }}.sweep_stuck() returns table (id uuid, status text)
language plpgsql volatile set search_path = '' as $$
declare
    v_ids uuid[];
    v_statuses text[];
    v_types text[];
    v_due timestamptz[];
    r record;
begin
    with expired as (
        select e.id, {{ s }}.attempt_limit(e.max_attempts, e.handler_max_attempts,
                                          coalesce(t.max_attempts, d.max_attempts)) as round_limit
        from {{ s }}.jobs e
        cross join (select x.max_attempts from {{ s }}.job_types x where x.type = '*') d
        left join {{ s }}.job_types t on t.type = e.type
        where e.id = any (array(
            select l.id from {{ s }}.jobs l
            where l.status = 'processing' and l.lease_expires_at < now()
            for update of l skip locked
        ))
    ), changed as (
        update {{ s }}.jobs j
        set status = case when j.attempts - j.round_start < x.round_limit then 'pending' else 'failed' end,
            scheduled_for = case when j.attempts - j.round_start < x.round_limit
                then now() + {{ s }}.backoff(j.type, j.attempts - j.round_start) else j.scheduled_for end,
            completed_at = case when j.attempts - j.round_start < x.round_limit then null else now() end,
            last_error = format('lease expired at %s (worker %s)', j.lease_expires_at, j.worker_id),
            lease_expires_at = null, updated_at = now()
        from expired x
        where j.id = x.id and j.status = 'processing' and j.lease_expires_at < now()
        returning j.id, j.status, j.type, j.scheduled_for, j.attempts, j.worker_id, j.started_at, j.last_error
    ), history as (
        insert into {{ s }}.job_attempts (job_id, attempt, worker_id, started_at, outcome, error)
        select c.id, c.attempts, c.worker_id, c.started_at, 'lease_expired', c.last_error from changed c
    )
    select array_agg(c.id), array_agg(c.status), array_agg(c.type), array_agg(c.scheduled_for)
    into v_ids, v_statuses, v_types, v_due from changed c;
    for r in select u.type, min(u.due) as due from unnest(v_types, v_due, v_statuses) as u(type, due, status)
             where u.status = 'pending' group by u.type loop
        perform {{ s }}._wake_for(r.type, 0, r.due);
    end loop;
    return query select u.id, u.status from unnest(v_ids, v_statuses) as u(id, status);
end
$$;

-- ---- Waking: one wake-up per type per transaction, due-time hints, signed requests ----------------
-- The worker's signing secret replaces the bearer token: wake-ups carry
-- X-Jobkit-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">, so a request read from
-- pg_net's queue (readable by every role) cannot be used to call the worker after a short window.
insert into {{ s }}.settings (key, value) values ('secret_previous_until', 'null')
on conflict (key) do nothing;

-- HMAC-SHA256 (RFC 2104) with the built-in sha256(): no extension needed.
create function {{ s }}._hmac(p_key bytea, p_message bytea) returns bytea
language plpgsql immutable strict set search_path = '' as $$
declare
    v_key bytea := p_key;
    v_inner bytea;
    v_outer bytea;
begin
    if length(v_key) > 64 then
        v_key := sha256(v_key);
    end if;
    v_key := v_key || decode(repeat('00', 64 - length(v_key)), 'hex');
    v_inner := v_key;
    v_outer := v_key;
    for i in 0 .. 63 loop
        v_inner := set_byte(v_inner, i, get_byte(v_key, i) # 54);   -- 0x36
        v_outer := set_byte(v_outer, i, get_byte(v_key, i) # 92);   -- 0x5c
    end loop;
    return sha256(v_outer || sha256(v_inner || p_message));
end
$$;

-- Store a secret: Vault's '<schema>_<name>' when Vault is installed, else the private table.
create function {{ s }}._put_secret(p_name text, p_value text) returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_vault_name text := {{ schema | literal }} || '_' || p_name;
    v_id uuid;
begin
    if to_regclass('vault.decrypted_secrets') is not null
       and to_regprocedure('vault.create_secret(text,text,text,uuid)') is not null then
        select d.id into v_id from vault.decrypted_secrets d where d.name = v_vault_name;
        if v_id is null then
            perform vault.create_secret(p_value, v_vault_name, 'jobkit ' || replace(p_name, '_', ' '));
        else
            perform vault.update_secret(v_id, p_value);
        end if;
        return;
    end if;
    insert into {{ s }}.secrets (name, value) values (p_name, p_value)
    on conflict (name) do update set value = excluded.value, updated_at = now();
end
$$;

-- Replace the signing secret; the previous one stays valid for p_grace, so running workers see no
-- failed wake-up while they pick up the new one.
create function {{ s }}.set_worker_secret(p_secret text, p_grace interval default '10 minutes') returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_old text := {{ s }}.secret('worker_secret');
begin
    if p_secret is null or length(p_secret) < 32 then
        raise exception 'jobkit.set_worker_secret: the secret must have at least 32 characters'
            using errcode = '22023';
    end if;
    if v_old is not null and v_old <> p_secret then
        perform {{ s }}._put_secret('worker_secret_previous', v_old);
        update {{ s }}.settings
        set value = to_jsonb(now() + greatest(coalesce(p_grace, interval '0'), interval '0')), updated_at = now()
        where key = 'secret_previous_until';
    end if;
    perform {{ s }}._put_secret('worker_secret', p_secret);
end
$$;

-- A new signing secret generated here, so it never travels as a statement parameter: 366 random
-- bits from gen_random_uuid()'s strong random source.
create function {{ s }}.rotate_worker_secret(p_grace interval default '10 minutes') returns void
language sql volatile security definer set search_path = '' as $$
    select {{ s }}.set_worker_secret(encode(
        uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex'),
        p_grace)
$$;

-- What a worker verifies signatures with: the current secret and, during a rotation's grace
-- period, the previous one.
create function {{ s }}.worker_keys() returns table (current_secret text, previous_secret text)
language sql stable security definer set search_path = '' as $$
    select {{ s }}.secret('worker_secret'),
           case when ({{ s }}.setting('secret_previous_until') #>> '{}')::timestamptz > now()
                then {{ s }}.secret('worker_secret_previous') end
$$;

-- A bearer token stored by an earlier jobkit becomes the signing secret.
do $migrate$
begin
    if {{ s }}.secret('worker_token') is not null and {{ s }}.secret('worker_secret') is null then
        perform {{ s }}._put_secret('worker_secret', {{ s }}.secret('worker_token'));
    end if;
    delete from {{ s }}.secrets where name = 'worker_token';
end
$migrate$;

-- Send p_calls signed wake-ups over pg_net; p_at (optional) tells the worker when the type's next
-- job becomes due. Each request gets its own nonce, so no two requests share a signature.
drop function {{ s }}._wake_http(text, int, int);
create function {{ s }}._wake_http(p_type text, p_calls int, p_at timestamptz default null)
returns int
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_url text := {{ s }}.secret('worker_url');
    v_secret text := {{ s }}.secret('worker_secret');
    v_body jsonb;
    v_t text;
    v_request bigint;
begin
    if v_url is null or v_secret is null then
        insert into {{ s }}.wakeups (type, transport, outcome, error, checked_at)
        values (p_type, 'pg_net', 'failed', 'worker URL or secret not set: run `jobkit secrets set`', now());
        return 0;
    end if;
    v_t := floor(extract(epoch from clock_timestamp()))::bigint::text;
    for i in 1 .. p_calls loop
        v_body := jsonb_build_object('type', p_type, 'budget_ms', ({{ s }}.setting('budget_ms'))::int,
                                     'nonce', gen_random_uuid());
        if p_at is not null then
            v_body := v_body || jsonb_build_object('at', extract(epoch from p_at));
        end if;
        v_request := net.http_post(
            url := v_url,
            body := v_body,
            params := '{}'::jsonb,
            headers := jsonb_build_object(
                'Content-Type', 'application/json',
                'X-Jobkit-Signature', 't=' || v_t || ',v1=' || encode({{ s }}._hmac(
                    convert_to(v_secret, 'UTF8'), convert_to(v_t || '.' || v_body::text, 'UTF8')), 'hex')),
            timeout_milliseconds := ({{ s }}.setting('wake_timeout_ms'))::int
        );
        insert into {{ s }}.wakeups (type, transport, request_id) values (p_type, 'pg_net', v_request);
    end loop;
    return p_calls;
exception when others then
    -- pg_net missing or refusing: record it, never break the caller (an enqueue, a cron tick).
    insert into {{ s }}.wakeups (type, transport, outcome, error, checked_at)
    values (p_type, 'pg_net', 'failed', sqlerrm, now());
    return 0;
end
$$;

drop function {{ s }}._send_wake(text, int);
create function {{ s }}._send_wake(p_type text, p_calls int, p_at timestamptz default null) returns int
language plpgsql volatile security definer set search_path = '' as $$
begin
    if ({{ s }}.setting('transport')) #>> '{}' = 'pg_net' then
        return {{ s }}._wake_http(p_type, p_calls, p_at);
    end if;
    -- NOTIFY has no answer to reconcile, so it is not recorded in wakeups; it is delivered at
    -- commit, and duplicates within a transaction fold into one.
    perform pg_notify(({{ s }}.setting('channel')) #>> '{}',
                      case when p_at is null then json_build_object('type', p_type, 'calls', p_calls)
                           else json_build_object('type', p_type, 'at', extract(epoch from p_at)) end::text);
    return 1;
end
$$;

-- Wake the worker for jobs this transaction made runnable: p_due jobs due now, or (when none is
-- due) the earliest time p_at at which one becomes due. What was already sent in this transaction
-- is remembered in a transaction-local setting, so however many enqueue calls or statements a
-- transaction makes, it sends one wake-up per type, plus one more per batch_size due jobs up to
-- max_fanout, plus a due-time hint only when it is earlier than the one already sent.
create function {{ s }}._wake_for(p_type text, p_due bigint, p_at timestamptz) returns void
language plpgsql volatile security definer set search_path = '' as $$
declare
    v_guc constant text := {{ (schema ~ ".wakes") | literal }};
    v_state jsonb := coalesce(nullif(current_setting(v_guc, true), ''), '{}')::jsonb;
    v_mine jsonb := coalesce(v_state -> p_type, '[0, 0, null]'::jsonb);
    v_calls int := (v_mine ->> 0)::int;
    v_rows bigint := (v_mine ->> 1)::bigint + coalesce(p_due, 0);
    v_at timestamptz := (v_mine ->> 2)::timestamptz;
    v_want int;
begin
    if not coalesce((select t.wake_on_insert from {{ s }}.job_types t
                     where t.type in (p_type, '*') order by t.type = '*' limit 1), true) then
        return;
    end if;
    if v_rows > 0 then
        v_want := least(greatest(({{ s }}.setting('max_fanout'))::int, 1),
                        ceil(v_rows::numeric / greatest(({{ s }}.setting('batch_size'))::int, 1))::int);
        if v_want > v_calls then
            perform {{ s }}._send_wake(p_type, v_want - v_calls);
            v_calls := v_want;
        end if;
    elsif p_at is not null and (v_at is null or p_at < v_at) then
        perform {{ s }}._send_wake(p_type, 1, p_at);
        v_at := p_at;
    end if;
    perform set_config(v_guc, jsonb_set(v_state, array[p_type],
                                        jsonb_build_array(v_calls, v_rows, v_at))::text, true);
end
$$;

-- The insert trigger: per statement, per type, the due rows and the earliest future one.
create or replace function {{ s }}.jobs_wake_on_insert() returns trigger
language plpgsql security definer set search_path = '' as $$
declare
    r record;
begin
    for r in
        select n.type, count(*) filter (where n.scheduled_for <= now()) as due,
               min(n.scheduled_for) filter (where n.scheduled_for > now()) as at
        from new_jobs n where n.status = 'pending' group by n.type
    loop
        perform {{ s }}._wake_for(r.type, r.due, r.at);
    end loop;
    return null;
end
$$;

-- When the next pending job of a type becomes due (null: none), by a skip scan over the claim
-- index: one probe per distinct priority, however many jobs are pending.
create function {{ s }}.next_due(p_type text) returns timestamptz
language plpgsql stable set search_path = '' as $$
declare
    v_priority int;
    v_at timestamptz;
    v_best timestamptz;
begin
    select j.priority into v_priority from {{ s }}.jobs j
    where j.type = p_type and j.status = 'pending' order by j.priority desc limit 1;
    while v_priority is not null loop
        select j.scheduled_for into v_at from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.priority = v_priority
        order by j.scheduled_for limit 1;
        v_best := least(v_best, v_at);
        select j.priority into v_priority from {{ s }}.jobs j
        where j.type = p_type and j.status = 'pending' and j.priority < v_priority
        order by j.priority desc limit 1;
    end loop;
    return v_best;
end
$$;

-- Run a failed, dead or cancelled job again now with a fresh round of attempts, and wake the worker.
create or replace function {{ s }}.retry_job(p_id uuid) returns boolean
language plpgsql volatile set search_path = '' as $$
declare
    v_type text;
begin
    update {{ s }}.jobs j
    set status = 'pending', scheduled_for = now(), completed_at = null, lease_expires_at = null,
        round_start = j.attempts, updated_at = now()
    where j.id = p_id and j.status in ('failed', 'dead', 'cancelled')
    returning j.type into v_type;
    if v_type is null then
        return false;
    end if;
    perform {{ s }}._wake_for(v_type, 1, null);
    return true;
end
$$;

revoke all on all tables in schema {{ s }} from public;
revoke all on all functions in schema {{ s }} from public;
{% include "grants.sql" %}
