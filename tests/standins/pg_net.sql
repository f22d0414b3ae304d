-- =====================================================================================================
-- TEST STAND-IN for supabase/pg_net 0.20.x (SQL API as of 0.20.4). This is NOT the real extension.
-- =====================================================================================================
-- pg_net cannot be built on the test machines, so the test suite loads this plain-SQL copy of its
-- public surface and runs tests/standins/pgnet_worker.py (PgNetStandIn) in place of pg_net's C
-- background worker. The function names, argument names, types, defaults, the two unlogged tables
-- and the grants follow pg_net's sql/pg_net.sql (unchanged from 0.19.7 to 0.20.4).
--
-- Async semantics: net.http_get/http_post/http_delete only INSERT a row into net.http_request_queue,
-- inside the caller's transaction, and call net.wake(). The worker cannot see that row before the
-- caller commits, and a rollback removes it: pg_net's "the request is sent only after commit; a
-- rollback means nothing is sent". Real pg_net's net.wake() (C) registers a commit callback that sets
-- the worker's should_wake flag and latch; here net.wake() is a NOTIFY on the stand-in's channel
-- 'pg_net_test_standin_wake', which PostgreSQL also delivers at commit only (never on rollback, once
-- per transaction). PgNetStandIn listens on it and then works like pg_net's worker: batches of up to
-- batch_size requests with a 1 s pause after each, so requests that commit during a batch or a pause
-- wait up to a second (see pgnet_worker.py). Rows INSERTed directly into the queue, without
-- net.wake(), are sent only at some later wake, as in pg_net. Differences: NOTIFY takes PostgreSQL's
-- notify-queue lock at commit (pg_net's wake is a lock-free flag), and a transaction that called
-- net.wake() cannot be PREPAREd.
--
-- Loading this file DROPS any existing `net` schema (queued requests and responses included). It
-- refuses to run where the real pg_net extension is installed.
-- =====================================================================================================

do $$
begin
    if exists (select from pg_catalog.pg_extension where extname = 'pg_net') then
        raise exception 'the real pg_net extension is installed here: refusing to load the test stand-in';
    end if;
end
$$;

drop schema if exists net cascade;
create schema net;
comment on schema net is 'TEST STAND-IN for supabase/pg_net 0.20.x (tests/standins/pg_net.sql), not the real extension';

create domain net.http_method as text
check (
  value ilike 'get'
  or value ilike 'post'
  or value ilike 'delete'
);

-- Store pending requests. The background worker reads from here
-- API: Private
create unlogged table net.http_request_queue(
    id bigserial,
    method net.http_method not null,
    url text not null,
    headers jsonb,
    body bytea,
    timeout_milliseconds int not null
);

-- Associates a response with a request
-- API: Private
create unlogged table net._http_response(
    id bigint,
    status_code integer,
    content_type text,
    headers jsonb,
    content text,
    timed_out bool,
    error_msg text,
    created timestamptz not null default now()
);

create index on net._http_response (created);

-- Real pg_net looks for its background worker (backend_type 'pg_net <version> worker'). The stand-in
-- worker is an ordinary client connection, recognisable by its application_name.
create or replace function net.check_worker_is_up() returns void as $$
begin
  if not exists (
    select pid from pg_stat_activity
    where backend_type ilike '%pg_net%' or application_name ilike 'pg_net%worker%'
  ) then
    raise exception using
      message = 'the pg_net background worker is not up'
    , detail  = 'the pg_net background worker is down due to an internal error and cannot process requests'
    , hint    = 'make sure that you didn''t modify any of pg_net internal tables';
  end if;
end
$$ language plpgsql;
comment on function net.check_worker_is_up() is 'raises an exception if the pg_net background worker is not up, otherwise it doesn''t return anything';

-- Blocks until an http_request is complete
-- API: Private
create or replace function net._await_response(
    request_id bigint
)
    returns bool
    language plpgsql
as $$
declare
    rec net._http_response;
begin
    while rec is null loop
        select *
        into rec
        from net._http_response
        where id = request_id;

        if rec is null then
            -- Wait 50 ms before checking again
            perform pg_sleep(0.05);
        end if;
    end loop;

    return true;
end;
$$;

-- url encode a string (real pg_net: C, curl_escape; everything but A-Z a-z 0-9 - . _ ~ becomes %XX
-- of its UTF-8 bytes)
-- API: Private
create or replace function net._urlencode_string(string varchar)
    returns text
    language sql
    immutable
as $$
    select case when string is null then null else coalesce((
        select string_agg(
                   case when b between 48 and 57 or b between 65 and 90 or b between 97 and 122
                             or b in (45, 46, 95, 126)
                        then chr(b)
                        else '%' || upper(lpad(to_hex(b), 2, '0'))
                   end, '' order by i)
        from (select convert_to(string, 'UTF8') as bytes) s,
             generate_series(0, length(s.bytes) - 1) as i,
             lateral get_byte(s.bytes, i) as b
    ), '') end
$$;

-- Append url-encoded params to a url (real pg_net: C, curl_url with CURLU_APPENDQUERY, which also
-- normalises an empty path to '/' and rejects a url without a scheme)
-- API: Private
create or replace function net._encode_url_with_params_array(url text, params_array text[])
    returns text
    language plpgsql
    immutable
as $$
declare
    base text;
    fragment text := '';
    param text;
begin
    if url is null or url !~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]' then
        raise exception 'URL using bad/illegal format or missing URL';
    end if;
    base := url;
    if strpos(base, '#') > 0 then
        fragment := substr(base, strpos(base, '#'));
        base := substr(base, 1, strpos(base, '#') - 1);
    end if;
    base := regexp_replace(base, '^([A-Za-z][A-Za-z0-9+.-]*://[^/?#]*)([?]|$)', '\1/\2');
    foreach param in array coalesce(params_array, '{}') loop
        continue when param is null;
        if strpos(base, '?') = 0 then
            base := base || '?' || param;
        elsif base like '%?' then
            base := base || param;
        else
            base := base || '&' || param;
        end if;
    end loop;
    return base || fragment;
end
$$;

-- Real pg_net: C functions that restart its background worker / wait until it runs. They do nothing
-- here: PgNetStandIn is started and stopped by the tests.
create or replace function net.worker_restart()
  returns bool
  language sql
as $$ select true $$;

create or replace function net.wait_until_running()
  returns void
  language sql
as $$ select $$;
comment on function net.wait_until_running() is 'waits until the worker is running';

-- Real pg_net: C; at commit it sets the worker's should_wake flag and latch, nothing on rollback.
-- The stand-in: a NOTIFY, delivered at commit only and folded to one per transaction, on the channel
-- PgNetStandIn listens on (WAKE_CHANNEL in pgnet_worker.py).
create or replace function net.wake()
  returns void
  language sql
as $$ select pg_notify('pg_net_test_standin_wake', '') $$;

-- Interface to make an async request
-- API: Public
create or replace function net.http_get(
    -- url for the request
    url text,
    -- key/value pairs to be url encoded and appended to the `url`
    params jsonb default '{}'::jsonb,
    -- key/values to be included in request headers
    headers jsonb default '{}'::jsonb,
    -- the maximum number of milliseconds the request may take before being cancelled
    timeout_milliseconds int default 5000
)
    -- request_id reference
    returns bigint
    language plpgsql
as $$
declare
    request_id bigint;
    params_array text[];
begin
    select coalesce(array_agg(net._urlencode_string(key) || '=' || net._urlencode_string(value)), '{}')
    into params_array
    from jsonb_each_text(params);

    -- Add to the request queue
    insert into net.http_request_queue(method, url, headers, timeout_milliseconds)
    values (
        'GET',
        net._encode_url_with_params_array(url, params_array),
        headers,
        timeout_milliseconds
    )
    returning id
    into request_id;

    perform net.wake();

    return request_id;
end
$$;

-- Interface to make an async request
-- API: Public
create or replace function net.http_post(
    -- url for the request
    url text,
    -- body of the POST request
    body jsonb default '{}'::jsonb,
    -- key/value pairs to be url encoded and appended to the `url`
    params jsonb default '{}'::jsonb,
    -- key/values to be included in request headers
    headers jsonb default '{"Content-Type": "application/json"}'::jsonb,
    -- the maximum number of milliseconds the request may take before being cancelled
    timeout_milliseconds int DEFAULT 5000
)
    -- request_id reference
    returns bigint
    language plpgsql
as $$
declare
    request_id bigint;
    params_array text[];
    content_type text;
begin

    -- Exctract the content_type from headers
    select
        header_value into content_type
    from
        jsonb_each_text(coalesce(headers, '{}'::jsonb)) r(header_name, header_value)
    where
        lower(header_name) = 'content-type'
    limit
        1;

    -- If the user provided new headers and omitted the content type
    -- add it back in automatically
    if content_type is null then
        select headers || '{"Content-Type": "application/json"}'::jsonb into headers;
    end if;

    -- Confirm that the content-type is set as "application/json"
    if content_type <> 'application/json' then
        raise exception 'Content-Type header must be "application/json"';
    end if;

    select
        coalesce(array_agg(net._urlencode_string(key) || '=' || net._urlencode_string(value)), '{}')
    into
        params_array
    from
        jsonb_each_text(params);

    -- Add to the request queue
    insert into net.http_request_queue(method, url, headers, body, timeout_milliseconds)
    values (
        'POST',
        net._encode_url_with_params_array(url, params_array),
        headers,
        convert_to(body::text, 'UTF8'),
        timeout_milliseconds
    )
    returning id
    into request_id;

    perform net.wake();

    return request_id;
end
$$;

-- Interface to make an async request
-- API: Public
create or replace function net.http_delete(
    -- url for the request
    url text,
    -- key/value pairs to be url encoded and appended to the `url`
    params jsonb default '{}'::jsonb,
    -- key/values to be included in request headers
    headers jsonb default '{}'::jsonb,
    -- the maximum number of milliseconds the request may take before being cancelled
    timeout_milliseconds int default 5000,
    -- optional body of the request
    body jsonb default NULL
)
    -- request_id reference
    returns bigint
    language plpgsql
as $$
declare
    request_id bigint;
    params_array text[];
begin
    select coalesce(array_agg(net._urlencode_string(key) || '=' || net._urlencode_string(value)), '{}')
    into params_array
    from jsonb_each_text(params);

    -- Add to the request queue
    insert into net.http_request_queue(method, url, headers, body, timeout_milliseconds)
    values (
        'DELETE',
        net._encode_url_with_params_array(url, params_array),
        headers,
        convert_to(body::text, 'UTF8'),
        timeout_milliseconds
    )
    returning id
    into request_id;

    perform net.wake();

    return request_id;
end
$$;

-- Lifecycle states of a request (all protocols)
-- API: Public
create type net.request_status as enum ('PENDING', 'SUCCESS', 'ERROR');

-- A response from an HTTP server
-- API: Public
create type net.http_response AS (
    status_code integer,
    headers jsonb,
    body text
);

-- State wrapper around responses
-- API: Public
create type net.http_response_result as (
    status net.request_status,
    message text,
    response net.http_response
);

-- Collect respones of an http request
-- API: Private
create or replace function net._http_collect_response(
    -- request_id reference
    request_id bigint,
    -- when `true`, return immediately. when `false` wait for the request to complete before returning
    async bool default true
)
    -- http response composite wrapped in a result type
    returns net.http_response_result
    language plpgsql
as $$
declare
    rec net._http_response;
begin

    if not async then
        perform net._await_response(request_id);
    end if;

    select *
    into rec
    from net._http_response
    where id = request_id;

    if rec is null or rec.error_msg is not null then
        -- The request is either still processing or the request_id provided does not exist
        return (
            'ERROR',
            coalesce(rec.error_msg, 'request matching request_id not found'),
            null
        )::net.http_response_result;

    end if;

    -- Return a valid, populated http_response_result
    return (
        'SUCCESS',
        'ok',
        (
            rec.status_code,
            rec.headers,
            rec.content
        )::net.http_response
    )::net.http_response_result;
end;
$$;

-- Deprecated, and broken exactly as in pg_net 0.20.4: calling it fails with
-- "query has no destination for result data".
create or replace function net.http_collect_response(
    -- request_id reference
    request_id bigint,
    -- when `true`, return immediately. when `false` wait for the request to complete before returning
    async bool default true
)
    -- http response composite wrapped in a result type
    returns net.http_response_result
    language plpgsql
as $$
begin
  raise notice 'The net.http_collect_response function is deprecated.';
  select net._http_collect_response(request_id, async);
end;
$$;

-- pg_net 0.12+: functions are SECURITY INVOKER (the default above), the schema, tables and sequence
-- are open to PUBLIC; functions keep PostgreSQL's default EXECUTE grant to PUBLIC.
grant usage on schema net to PUBLIC;
grant all on all sequences in schema net to PUBLIC;
grant all on all tables in schema net to PUBLIC;
