{#- The wake path's decisions, written once and inlined where a single enqueue runs them (issue 23,
    stop 33): a plpgsql function call with `set search_path` costs more than the work these do, and a
    single enqueue made three of them (jobs_wake_on_insert -> _wake_for -> _wake_needed -> _wake_on).
    Called from sql/functions/70_wake.sql only: by jobs_wake_on_insert for a statement of one due row
    with nothing recorded yet in its transaction, and by _wake_for (the row triggers' entry, h28) for
    the same case and for its general path. Every built-in is qualified: the callers pin an empty
    search_path. Each macro is a plpgsql block of its own (its variables are its own); `type` and the
    result variable are the caller's names. -#}

{#- Whether `type` is woken on insert (its job_types row, else the '*' row, else yes) and not paused:
    one boolean expression. -#}
{% macro wake_on(type) -%}
(not exists (select from {{ s }}.pauses p where p.type = {{ type }} and p.key is null)
 and coalesce((select t.wake_on_insert from {{ s }}.job_types t where t.type = {{ type }}),
              (select t.wake_on_insert from {{ s }}.job_types t where t.type = '*'), true))
{%- endmacro %}

{#- Sets `send`: whether this transaction must send a due-now wake-up for `type`; records it when so.
    Wake-ups coalesce across transactions: none while a worker says it drains the type, and none
    within a second of another one sent since a worker last went idle on the type (that one is in
    flight: its drain will see this job). The type's wake lock, taken shared first (its own statement,
    before the snapshot that reads wake_drains) and held to the end of the transaction, keeps a worker
    from going idle (wake_idle) until this enqueue has ended, so its job is never left behind. Outside
    READ COMMITTED the snapshot may predate a worker going idle, so it always sends. The record is
    written under a try-lock: no enqueue waits for another. Null for a type that is not to be woken
    (wake_on), asked last: an enqueue that a drain or a recent wake-up covers reads neither job_types
    nor pauses. (False would not do: it is a wake-up left out for another one, which _wake_for records
    as made; a paused type records none.) `label`: the block's label, distinct in one function. -#}
{% macro wake_needed(type, send, label) -%}
<<{{ label }}>>
declare
    v_wn_draining timestamptz;
    v_wn_idle timestamptz;
    v_wn_sent timestamptz;
    v_wn_lock text;  -- the lock's void result: an assignment is a simple expression, a perform is a query
begin
    if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
        {{ send }} := case when {{ wake_on(type) | indent(8) }} then true end;
        exit {{ label }};
    end if;
    v_wn_lock := pg_catalog.pg_advisory_xact_lock_shared(
        pg_catalog.hashtextextended({{ (schema ~ ".wake:") | literal }} || {{ type }}, 0));
    select d.draining_until, d.idle_at into v_wn_draining, v_wn_idle
    from {{ s }}.wake_drains d where d.type = {{ type }};
    if v_wn_draining > pg_catalog.clock_timestamp() then
        {{ send }} := false;
        exit {{ label }};
    end if;
    select w.sent_at into v_wn_sent from {{ s }}.wake_sent w where w.type = {{ type }};
    if v_wn_sent > pg_catalog.clock_timestamp() - interval '1 second'
       and v_wn_sent > coalesce(v_wn_idle, '-infinity'::timestamptz) then
        {{ send }} := false;
        exit {{ label }};
    end if;
    if not {{ wake_on(type) | indent(8) }} then
        {{ send }} := null;
        exit {{ label }};
    end if;
    if pg_catalog.pg_try_advisory_xact_lock(
           pg_catalog.hashtextextended({{ (schema ~ ".wake_sent:") | literal }} || {{ type }}, 0)) then
        insert into {{ s }}.wake_sent as w (type, sent_at) values ({{ type }}, pg_catalog.clock_timestamp())
        on conflict (type) do update set sent_at = excluded.sent_at;
    end if;
    {{ send }} := true;
end {{ label }};
{%- endmacro %}

{#- The commonest wake-up (a single enqueue): one job of `type` due now, nothing recorded yet in this
    transaction. Decides (wake_needed), sends one wake-up when so, and writes the transaction's
    record {type: [1, 1, null, null, null]} (as text: no jsonb to parse or build), or '' for a type
    not to be woken. What _wake_for's general path would do, in a few expressions instead of twelve.
    `void`: a text variable of the caller's for the calls' results. -#}
{% macro wake_first(type, send, void) -%}
{{ wake_needed(type=type, send=send, label="first") }}
if {{ send }} then
    {{ void }} := {{ s }}._send_wake({{ type }}, 1);
end if;
{{ void }} := pg_catalog.set_config({{ (schema ~ ".wakes") | literal }}, case when {{ send }} is not null
    then '{' || pg_catalog.to_json({{ type }})::text || ':[1,1,null,null,null]}' else '' end, true);
{%- endmacro %}
