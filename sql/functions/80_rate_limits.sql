-- The public API: rate limits shared by every worker
-- sql/functions/80_rate_limits.sql: the token buckets.
-- Applied in file-name order (after 70_wake.sql, before 85_secrets.sql); sql/functions/README.md says how deploy applies these files.

-- Take up to p_want tokens from p_key's bucket now; returns how many were granted (0 .. p_want).
-- An unknown key grants everything (no limit configured).
create or replace function {{ s }}.take_tokens(p_key text, p_want int) returns int
language plpgsql volatile set search_path = '' as $$
declare
    v_bucket {{ s }}.rate_limits;
    v_now timestamptz;
    v_available float8;
    v_granted int;
begin
    if p_key is null or p_want <= 0 then
        return greatest(p_want, 0);
    end if;
    select * into v_bucket from {{ s }}.rate_limits r where r.key = p_key for update;
    if not found then
        return p_want;
    end if;
    v_now := clock_timestamp();
    v_available := least(v_bucket.burst::float8,
                         v_bucket.tokens + v_bucket.rate * extract(epoch from v_now - v_bucket.updated_at));
    v_granted := least(p_want, floor(v_available)::int);
    update {{ s }}.rate_limits r set tokens = v_available - v_granted, updated_at = v_now
    where r.key = p_key;
    return v_granted;
end
$$;

-- Give back tokens taken but not used (a claim found fewer jobs than it had tokens for).
create or replace function {{ s }}.return_tokens(p_key text, p_count int) returns void
language sql volatile set search_path = '' as $$
    update {{ s }}.rate_limits r set tokens = least(r.burst::float8, r.tokens + p_count)
    where r.key = p_key and p_count > 0
$$;

-- How long until p_key's bucket holds one token (zero when it does, or when there is no limit).
create or replace function {{ s }}.token_wait(p_key text) returns interval
language sql stable set search_path = '' as $$
    select coalesce((
        select make_interval(secs => greatest(0, (1 - least(r.burst::float8,
                   r.tokens + r.rate * extract(epoch from clock_timestamp() - r.updated_at))) / r.rate))
        from {{ s }}.rate_limits r where r.key = p_key
    ), interval '0')
$$;
