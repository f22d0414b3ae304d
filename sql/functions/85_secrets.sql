-- The public API: the worker's URL and signing secret, runtime settings
-- sql/functions/85_secrets.sql: settings, secrets (Vault when present), and signing.
-- Applied in file-name order (after 80_rate_limits.sql, before 90_views.sql); sql/functions/README.md says how deploy applies these files.

-- A setting's value.
create or replace function {{ s }}.setting(p_key text) returns jsonb
language sql stable set search_path = '' as $$
    select value from {{ s }}.settings where key = p_key
$$;

-- A secret by jobkit name ('worker_url', 'worker_secret'): Vault's '<schema>_<name>' when Vault is
-- installed, else the private table. Never logged, never part of any cron command.
create or replace function {{ s }}.secret(p_name text) returns text
language plpgsql stable security definer set search_path = '' as $$
declare
    v_value text;
begin
    if to_regclass('vault.decrypted_secrets') is not null then
        select d.decrypted_secret into v_value from vault.decrypted_secrets d
        where d.name = {{ schema | literal }} || '_' || p_name;
        if v_value is not null then
            return v_value;
        end if;
    end if;
    select s.value into v_value from {{ s }}.secrets s where s.name = p_name;
    return v_value;
end
$$;

-- Replace the signing secret; the previous one stays valid for p_grace, so running workers see no
-- failed wake-up while they pick up the new one.
create or replace function {{ s }}.set_worker_secret(p_secret text, p_grace interval default '10 minutes') returns void
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
create or replace function {{ s }}.rotate_worker_secret(p_grace interval default '10 minutes') returns void
language sql volatile security definer set search_path = '' as $$
    select {{ s }}.set_worker_secret(encode(
        uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex'),
        p_grace)
$$;

-- What a worker verifies signatures with: the current secret and, during a rotation's grace
-- period, the previous one.
create or replace function {{ s }}.worker_keys() returns table (current_secret text, previous_secret text)
language sql stable security definer set search_path = '' as $$
    select {{ s }}.secret('worker_secret'),
           case when ({{ s }}.setting('secret_previous_until') #>> '{}')::timestamptz > now()
                then {{ s }}.secret('worker_secret_previous') end
$$;

-- HMAC-SHA256 (RFC 2104) with the built-in sha256(): no extension needed.
create or replace function {{ s }}._hmac(p_key bytea, p_message bytea) returns bytea
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
create or replace function {{ s }}._put_secret(p_name text, p_value text) returns void
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
