"""The per-user job API ([user_api]): two signed-in users, anon and service_role against a real
database, as PostgREST runs their requests (SET ROLE + request.jwt.claims). The privilege matrix
over every table, view and function of jobkit's schema and the user schema is asserted in full."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobkit.config import KeyTemplate, RateLimitConfig, Settings, TypeConfig, UserApiConfig
from jobkit.connector import Database, Session
from jobkit.exceptions import DatabaseError, PrerequisiteError
from jobkit.jobs import Failure, StepRecord
from jobkit.lifecycle import Lifecycle, Statements
from jobkit.schema.deploy import DeployOptions, deploy

USER = "jobkit_user"
ALICE, BOB = str(uuid.uuid4()), str(uuid.uuid4())
# Subjects of Supabase's third-party auth providers: Clerk, Auth0 (two), Firebase; none is a UUID.
THIRD_PARTY = ("user_2NNEqL2nrIRdJ194ndJqAHwEfxC", "auth0|5f7c8ec7c33c6c004bbafe82",
               "google-oauth2|104857394857394857394", "kq6yKzK1mXa0Lw2V6nQ3bWm1ZPu2")
API = UserApiConfig(schema=USER, types=("export", "resize"), max_payload_bytes=200,
                    limit=RateLimitConfig(rate=0.001, burst=4))


@pytest.fixture
def url(db_url: str) -> str:
    with Database(db_url).session() as s:  # Supabase's Realtime publication, as a project has it
        s.execute("create publication supabase_realtime")
    settings = Settings(db_url=db_url, user_api=API)
    deploy(Database(db_url), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    return db_url


@pytest.fixture
def s(url: str) -> Iterator[Session]:
    with Database(url).session() as session:
        yield session


def as_role(s: Session, role: str, sub: str | None = None) -> None:
    """What PostgREST does per request: the role, and the JWT's claims as a JSON setting."""
    s.execute("reset role")
    claims = {"role": role, **({"sub": sub} if sub else {})}
    s.execute("select set_config('request.jwt.claims', %s, false)", (json.dumps(claims),))
    s.execute("select set_config('role', %s, false)", (role,))


def admin(s: Session) -> None:
    s.execute("reset role")
    s.execute("select set_config('request.jwt.claims', '', false)")


def enqueue(s: Session, user: str, job_type: str = "export", payload: Any = None) -> Any:
    as_role(s, "authenticated", user)
    try:
        return s.scalar(f"select {USER}.enqueue(%s, %s::jsonb)", (job_type, json.dumps(payload or {"n": 1})))
    finally:
        admin(s)


def visible(s: Session, user: str) -> list[dict[str, Any]]:
    as_role(s, "authenticated", user)
    try:
        return s.all(f"select * from {USER}.jobs order by created_at")
    finally:
        admin(s)


def test_users_enqueue_and_see_only_their_own_jobs(s: Session) -> None:
    a1, a2 = enqueue(s, ALICE), enqueue(s, ALICE, "resize")
    b1 = enqueue(s, BOB)
    assert [r["id"] for r in visible(s, ALICE)] == [a1, a2]
    assert [r["id"] for r in visible(s, BOB)] == [b1]
    owners = dict(s.all("select id, owner from jobkit.jobs") and
                  [(r["id"], str(r["owner"])) for r in s.all("select id, owner from jobkit.jobs")])
    assert owners == {a1: ALICE, a2: ALICE, b1: BOB}
    as_role(s, "authenticated", BOB)  # Bob cannot learn that Alice's job exists, nor count it
    assert s.scalar(f"select count(*) from {USER}.jobs where id = %s", (a1,)) == 0
    assert s.scalar(f"select count(*) from {USER}.jobs") == 1
    assert s.scalar(f"select {USER}.cancel(%s)", (a1,)) is False  # same answer as for an unknown id
    assert s.scalar(f"select {USER}.cancel(%s)", (uuid.uuid4(),)) is False
    admin(s)
    assert s.scalar("select status from jobkit.jobs where id = %s", (a1,)) == "pending"


def test_cancel_own_pending_job_only(s: Session) -> None:
    mine, running = enqueue(s, ALICE), enqueue(s, ALICE)
    Lifecycle(s).claim("export", 10, "w", timedelta(minutes=1))  # both start running
    s.execute("update jobkit.jobs set status = 'pending', attempts = 0, lease_expires_at = null "
              "where id = %s", (mine,))
    as_role(s, "authenticated", ALICE)
    assert s.scalar(f"select {USER}.cancel(%s)", (mine,)) is True
    assert s.scalar(f"select {USER}.cancel(%s)", (running,)) is False
    assert s.scalar(f"select status from {USER}.jobs where id = %s", (mine,)) == "cancelled"
    admin(s)


def test_status_result_and_error_reach_the_owner(s: Session) -> None:
    ok, bad = enqueue(s, ALICE), enqueue(s, ALICE)
    life = Lifecycle(s)
    claimed = {c.id: c.attempts for c in life.claim("export", 10, "worker-9", timedelta(minutes=1))}
    assert {r["status"] for r in visible(s, ALICE)} == {"processing"}
    life.complete([(ok, claimed[ok], json.dumps({"url": "https://files/x.csv"}))])
    life.fail([Failure(bad, claimed[bad], 'Traceback (most recent call last):\n  File "/srv/app.py"\n'
                                         "ValueError: report too large", permanent=True)])
    rows = {r["id"]: r for r in visible(s, ALICE)}
    assert rows[ok]["status"] == "completed" and rows[ok]["result"] == {"url": "https://files/x.csv"}
    assert rows[bad]["status"] == "failed" and rows[bad]["error"] == "ValueError: report too large"
    assert rows[ok]["error"] is None and rows[bad]["result"] is None
    s.execute("delete from jobkit.jobs where id = %s", (ok,))  # pruned: gone for the user too
    assert [r["id"] for r in visible(s, ALICE)] == [bad]


def _step(s: Session, job: Any, attempt: int, name: str, started: datetime, error: str | None = None) -> None:
    """What ctx.step writes when the step ends: its record, fenced by the attempt (save_steps)."""
    held = s.run(Statements().save_steps([StepRecord(job, attempt, name, 1, None, error, 1, started)]))
    assert held == {(job, attempt)}


def test_the_owner_sees_the_current_step_and_progress_of_their_job(s: Session) -> None:
    """A durable job's current step (the job_steps record written last: its name and status) and
    its progress reach its owner's row, under the same RLS: the other user and anon see nothing."""
    a, b = enqueue(s, ALICE), enqueue(s, BOB)
    life = Lifecycle(s)
    attempts = {c.id: c.attempts for c in life.claim("export", 10, "w", timedelta(minutes=1))}
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    _step(s, a, attempts[a], "charge", t0)
    life.progress([(a, attempts[a], {"fraction": 0.5, "message": "charged"})])
    [row] = [r for r in visible(s, ALICE) if r["id"] == a]
    assert (row["step"], row["step_status"], row["step_started_at"]) == ("charge", "completed", t0)
    assert row["step_finished_at"] is not None and row["progress"]["message"] == "charged"
    # two records in one statement (a group commit): the one started last is the current step
    s.run(Statements().save_steps([StepRecord(a, attempts[a], "email", 1, None, "smtp down", 1,
                                              t0 + timedelta(seconds=2)),
                                   StepRecord(a, attempts[a], "label", 1, '"ok"', None, 1, t0 + timedelta(seconds=1))]))
    [row] = [r for r in visible(s, ALICE) if r["id"] == a]
    assert (row["step"], row["step_status"]) == ("email", "failed")
    assert "smtp" not in json.dumps(row, default=str)  # a step's error stays in jobkit's schema
    _step(s, a, attempts[a], "email", t0 + timedelta(seconds=3))  # retried: completed now
    [row] = [r for r in visible(s, ALICE) if r["id"] == a]
    assert (row["step"], row["step_status"]) == ("email", "completed")
    [bobs] = visible(s, BOB)
    assert bobs["id"] == b and bobs["step"] is None and bobs["progress"] is None
    as_role(s, "authenticated", BOB)
    assert s.scalar(f"select count(*) from {USER}.jobs where id = %s or step is not null", (a,)) == 0
    admin(s)
    as_role(s, "anon")
    with pytest.raises(PrerequisiteError):
        s.scalar(f"select step from {USER}.jobs")
    admin(s)
    # a replay of Alice's job is hers, and shows the last step it copied
    again = s.scalar("select jobkit.replay_job(%s, 'email')", (a,))
    [row] = [r for r in visible(s, ALICE) if r["id"] == again]
    assert (row["step"], row["step_status"], row["status"]) == ("label", "completed", "pending")


def test_a_deploy_adds_the_step_columns_and_fills_them(url: str) -> None:
    """A user API from before the step columns: the next deploy adds them and fills them from the
    steps already recorded (written while no trigger kept them)."""
    with Database(url).session() as s:
        a = enqueue(s, ALICE)
        [claimed] = Lifecycle(s).claim("export", 1, "w", timedelta(minutes=1))
        s.execute("drop trigger job_steps_user_added on jobkit.job_steps")
        s.execute("drop trigger job_steps_user_changed on jobkit.job_steps")
        s.execute(f"alter table {USER}.jobs drop column step, drop column step_status, "
                  "drop column step_started_at, drop column step_finished_at")
        _step(s, a, claimed.attempts, "charge", datetime(2026, 12, 1, tzinfo=UTC))
    settings = Settings(db_url=url, user_api=API)
    report = deploy(Database(url), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    assert [line for line in report.settings_changed if "user_api" in line]
    with Database(url).session() as s:
        [row] = visible(s, ALICE)
        assert (row["id"], row["step"], row["step_status"]) == (a, "charge", "completed")


def test_refusals(s: Session) -> None:
    with pytest.raises(PrerequisiteError, match="not open to users"):
        enqueue(s, ALICE, "send_email")
    with pytest.raises(DatabaseError, match="over 200 bytes") as too_big:
        enqueue(s, ALICE, "export", {"blob": "x" * 300})
    assert getattr(too_big.value.__cause__, "sqlstate", None) == "PT413"
    for _ in range(4):
        enqueue(s, BOB)
    with pytest.raises(DatabaseError, match="too many jobs") as limited:
        enqueue(s, BOB)  # the burst of 4 is spent; 0.001/s refills
    assert getattr(limited.value.__cause__, "sqlstate", None) == "PT429"
    enqueue(s, ALICE)  # a bucket per user: Alice is not limited by Bob
    as_role(s, "authenticated")  # a JWT without sub
    with pytest.raises(PrerequisiteError, match="sign in"):
        s.scalar(f"select {USER}.enqueue('export', '{{}}')")
    admin(s)
    assert s.scalar("select count(*) from jobkit.jobs") == 5  # nothing refused was written


@pytest.mark.parametrize("statement", [
    f"insert into {USER}.jobs (id, owner, type, status, created_at, updated_at) "
    f"values (gen_random_uuid(), '{BOB}', 'export', 'completed', now(), now())",
    f"update {USER}.jobs set status = 'completed'",
    f"delete from {USER}.jobs",
    "insert into jobkit.jobs (type, payload, owner) values ('export', '{}', '" + BOB + "')",
    "select * from jobkit.jobs",
    f"select {USER}.sync_job()",
    f"select {USER}.sync_steps()",
    "insert into jobkit.job_steps (job_id, name, occurrence, attempt, status, started_at) "
    "select id, 'x', 1, 1, 'completed', now() from jobkit.jobs",
])
def test_no_user_can_write_around_the_api(s: Session, statement: str) -> None:
    enqueue(s, ALICE)
    before = s.scalar(f"select md5(string_agg(t::text, ',' order by t::text)) from {USER}.jobs t")
    as_role(s, "authenticated", ALICE)
    with pytest.raises((PrerequisiteError, DatabaseError)):
        s.execute(statement)
    admin(s)
    assert s.scalar(f"select md5(string_agg(t::text, ',' order by t::text)) from {USER}.jobs t") == before


def test_privilege_matrix_in_full(s: Session) -> None:
    """Every table, view and function of both schemas, for anon, authenticated and service_role."""
    grants: set[tuple[str, str, str]] = set()
    for role in ("anon", "authenticated", "service_role"):
        for schema in ("jobkit", USER):
            if s.scalar("select has_schema_privilege(%s, %s, 'USAGE')", (role, schema)):
                grants.add((role, f"schema {schema}", "USAGE"))
        for r in s.all("select format('%%I.%%I', n.nspname, c.relname) as t from pg_class c "
                       "join pg_namespace n on n.oid = c.relnamespace "
                       "where n.nspname in ('jobkit', %s) and c.relkind in ('r', 'v')", (USER,)):
            for priv in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"):
                if s.scalar("select has_table_privilege(%s, %s, %s)", (role, r["t"], priv)):
                    grants.add((role, r["t"], priv))
        for r in s.all("select p.oid::regprocedure::text as f from pg_proc p "
                       "join pg_namespace n on n.oid = p.pronamespace where n.nspname in ('jobkit', %s)",
                       (USER,)):
            if s.scalar("select has_function_privilege(%s, %s, 'EXECUTE')", (role, r["f"])):
                grants.add((role, r["f"], "EXECUTE"))
    users = {g for g in grants if g[0] != "service_role"}
    assert users == {
        ("authenticated", f"schema {USER}", "USAGE"),
        ("authenticated", f"{USER}.jobs", "SELECT"),
        ("authenticated", f"{USER}.enqueue(text,jsonb)", "EXECUTE"),
        ("authenticated", f"{USER}.cancel(uuid)", "EXECUTE"),
        ("authenticated", f"{USER}.caller()", "EXECUTE"),
    }
    service = {(obj, priv) for role, obj, priv in grants if role == "service_role" and USER in obj}
    assert service == {(f"schema {USER}", "USAGE"), (f"{USER}.jobs", "SELECT")}
    assert ("service_role", "schema jobkit", "USAGE") in grants  # jobkit's own API, as before


def test_what_a_realtime_subscription_may_receive(s: Session) -> None:
    """Realtime's postgres_changes sends a change to a subscriber only when the subscriber may
    SELECT the row under RLS (it runs that check as the subscriber's role and claims): the table is
    in the publication, and each user is allowed exactly their own rows, anon none."""
    a, b = enqueue(s, ALICE), enqueue(s, BOB)
    assert s.scalar("select count(*) from pg_publication_tables where pubname = 'supabase_realtime' "
                    "and schemaname = %s and tablename = 'jobs'", (USER,)) == 1
    assert s.scalar("select relreplident from pg_class where oid = %s::regclass", (f"{USER}.jobs",)) == "f"
    for user, own, other in ((ALICE, a, b), (BOB, b, a)):
        as_role(s, "authenticated", user)
        assert s.scalar(f"select count(*) from {USER}.jobs where id = %s", (own,)) == 1
        assert s.scalar(f"select count(*) from {USER}.jobs where id = %s", (other,)) == 0
        admin(s)
    as_role(s, "anon")
    with pytest.raises(PrerequisiteError):
        s.scalar(f"select count(*) from {USER}.jobs")
    admin(s)


def test_a_second_deploy_changes_nothing(url: str) -> None:
    settings = Settings(db_url=url, user_api=API)
    report = deploy(Database(url), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    assert not [line for line in report.settings_changed if "user_api" in line]
    with Database(url).session() as s:  # a revoked grant is drift, and deploy restores it
        s.execute(f"revoke select on {USER}.jobs from authenticated")
    report = deploy(Database(url), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    assert [line for line in report.settings_changed if "user_api" in line]
    with Database(url).session() as s:
        assert s.scalar("select has_table_privilege('authenticated', %s, 'SELECT')", (f"{USER}.jobs",))


def test_supabase_client_as_signed_in_users(url: str) -> None:
    """What supabase-js does from a browser (here supabase-py, the same PostgREST requests): the
    anon key plus the user's access token; PostgREST stand-in in front of the real database."""
    import time

    import jwt as pyjwt
    from standins.postgrest import create_app, serve

    from supabase import ClientOptions, create_client

    secret, anon_key, service_key = "project-jwt-secret-" + "x" * 24, "anon-key-123", "service-key-456"

    def client(base: str, sub: str | None) -> Any:
        sb = create_client(base, anon_key, options=ClientOptions(postgrest_client_timeout=10))
        if sub:
            sb.postgrest.auth(pyjwt.encode({"sub": sub, "role": "authenticated", "exp": int(time.time()) + 600},
                                           secret, algorithm="HS256"))
        return sb.schema(USER)

    app = create_app(url, service_key=service_key, anon_key=anon_key, exposed_schemas=[USER],
                     jwt_secret=secret)
    with serve(app) as base:
        alice, bob, anon = client(base, ALICE), client(base, BOB), client(base, None)
        job = alice.rpc("enqueue", {"p_type": "export", "p_payload": {"month": "2026-11"}}).execute().data
        assert [r["id"] for r in alice.table("jobs").select("*").execute().data] == [job]
        assert bob.table("jobs").select("*").execute().data == []
        assert bob.rpc("cancel", {"p_id": job}).execute().data is False
        from postgrest.exceptions import APIError

        for call, code in ((lambda: bob.rpc("enqueue", {"p_type": "send_email", "p_payload": {}}), "42501"),
                           (lambda: alice.rpc("enqueue", {"p_type": "export", "p_payload": {"x": "y" * 300}}),
                            "PT413"),
                           (lambda: anon.rpc("enqueue", {"p_type": "export", "p_payload": {}}), "42501")):
            with pytest.raises(APIError) as refused:
                call().execute()
            assert refused.value.code == code, refused.value
        assert alice.rpc("cancel", {"p_id": job}).execute().data is True
        assert alice.table("jobs").select("*").execute().data[0]["status"] == "cancelled"
        carol = client(base, THIRD_PARTY[1])  # an Auth0 user (issue 21 Found 9): not a UUID
        theirs = carol.rpc("enqueue", {"p_type": "export", "p_payload": {}}).execute().data
        assert [(r["id"], r["owner"]) for r in carol.table("jobs").select("*").execute().data] == [
            (theirs, THIRD_PARTY[1])]
        assert alice.rpc("cancel", {"p_id": theirs}).execute().data is False


def test_third_party_auth_subjects(s: Session) -> None:
    """Issue 21 Found 9: Clerk, Auth0, Firebase and Cognito sign users in with subjects that are not
    UUIDs; each enqueues, sees only their own jobs, cancels them and has a bucket of their own."""
    ids = {sub: enqueue(s, sub) for sub in THIRD_PARTY}
    for sub, job in ids.items():
        assert [r["id"] for r in visible(s, sub)] == [job]
        assert visible(s, sub)[0]["owner"] == sub
    owners = {r["id"]: r["owner"] for r in s.all("select id, owner from jobkit.jobs")}
    assert owners == {job: sub for sub, job in ids.items()}
    clerk, auth0 = THIRD_PARTY[0], THIRD_PARTY[1]
    as_role(s, "authenticated", clerk)
    assert s.scalar(f"select {USER}.cancel(%s)", (ids[auth0],)) is False  # not Clerk's
    assert s.scalar(f"select {USER}.cancel(%s)", (ids[clerk],)) is True
    admin(s)
    for _ in range(3):  # the burst is 4: Auth0's bucket is its own, though "|" cannot be in a key
        enqueue(s, auth0)
    with pytest.raises(DatabaseError, match="too many jobs"):
        enqueue(s, auth0)
    enqueue(s, THIRD_PARTY[2])  # another "...|..." subject: another bucket
    buckets = [r["key"] for r in s.all("select key from jobkit.rate_limits where key like 'user:%' order by key")]
    assert f"user:{clerk}" in buckets and len(buckets) == len(THIRD_PARTY)
    as_role(s, "authenticated", "x" * 256)
    with pytest.raises(DatabaseError, match="JWT subject is over 255 characters"):
        s.scalar(f"select {USER}.enqueue('export', '{{}}')")
    admin(s)


def _deploy_types(db_url: str, **types: TypeConfig) -> None:
    api = UserApiConfig(schema=USER, types=tuple(types), limit=RateLimitConfig(rate=1.0, burst=100))
    deploy(Database(db_url), Settings(db_url=db_url, types=types, user_api=api), DeployOptions(schedules=False),
           echo=lambda _m: None)


def _keyed(template: str, **limits: Any) -> TypeConfig:
    return TypeConfig(fair=True, concurrency_key=KeyTemplate.parse(template, "test"), **limits)


def test_a_user_cannot_take_a_tenants_slot(db_url: str) -> None:
    """Issue 21 Found 6: the key of a user's job is never rendered from the payload the user wrote,
    even where the type's template names a payload field (jobkit.toml refuses that for a [user_api]
    type; this is the database's own guard): the tenant's only slot stays the tenant's."""
    _deploy_types(db_url, report=_keyed("tenant:{payload.tenant_id}", max_running_per_key=1))
    with Database(db_url).session() as s:
        life = Lifecycle(s)
        from jobkit.jobs import NewJob

        tenant_job = life.enqueue(NewJob("report", {"tenant_id": "acme"}))
        users_job = enqueue(s, ALICE, "report", {"tenant_id": "acme"})
        keys = {r["id"]: r["concurrency_key"] for r in s.all("select id, concurrency_key from jobkit.jobs")}
        assert keys == {tenant_job: "tenant:acme", users_job: "tenant:"}
        claimed = {j.id for j in life.claim("report", 10, "w", timedelta(minutes=1))}
        assert claimed == {tenant_job, users_job}  # two keys, one slot each


def test_the_owner_keys_a_users_jobs(db_url: str) -> None:
    """Issue 21 Found 6: with `concurrency_key = "user:{owner}"` each user has their own slots."""
    _deploy_types(db_url, report=_keyed("user:{owner}", max_running_per_key=1))
    with Database(db_url).session() as s:
        jobs = [enqueue(s, ALICE, "report", {"tenant_id": "acme"}), enqueue(s, ALICE, "report"),
                enqueue(s, THIRD_PARTY[1], "report")]
        keys = {r["id"]: r["concurrency_key"] for r in s.all("select id, concurrency_key from jobkit.jobs")}
        assert [keys[j] for j in jobs] == [f"user:{ALICE}", f"user:{ALICE}", f"user:{THIRD_PARTY[1]}"]
        claimed = {j.id for j in Lifecycle(s).claim("report", 10, "w", timedelta(minutes=1))}
        assert len(claimed) == 2 and jobs[2] in claimed  # one of Alice's, and the other user's


def test_a_key_that_is_too_long_gets_413(db_url: str) -> None:
    """Issue 21 Found 6: a key over 1000 characters is refused with PT413 (HTTP 413), not a raw
    check-constraint error, and nothing is written."""
    _deploy_types(db_url, report=_keyed("k" * 990 + ":{owner}"))
    with Database(db_url).session() as s:
        enqueue(s, "short", "report")  # 990 + 1 + 5 characters: fits
        with pytest.raises(DatabaseError, match="concurrency key is over 1000 characters") as refused:
            enqueue(s, ALICE, "report")
        assert getattr(refused.value.__cause__, "sqlstate", None) == "PT413"
        assert "shorten [types.report] concurrency_key" in (refused.value.hint or "")
        assert s.scalar("select count(*) from jobkit.jobs") == 1


# Supabase's linter (splinter) lints 0028 anon_security_definer_function_executable and 0029
# authenticated_security_definer_function_executable, restated: SECURITY DEFINER functions in the
# Data API's exposed schemas (pgrst.db_schemas) that the role may execute, outside Supabase's own
# schemas. With exposed = every schema, it is the lints' older form, which looked at all schemas.
DEFINER_LINT = """
select p.pronamespace::regnamespace::text || '.' || p.proname
       || '(' || pg_get_function_identity_arguments(p.oid) || ')' as function
from pg_proc p
where p.prosecdef and has_function_privilege(%(role)s, p.oid, 'EXECUTE')
  and p.pronamespace::regnamespace::text = any(%(exposed)s)
  and p.pronamespace::regnamespace::text not in ('auth', 'cron', 'extensions', 'graphql', 'graphql_public',
      'information_schema', 'net', 'pgmq', 'pgsodium', 'pg_catalog', 'realtime', 'storage',
      'supabase_functions', 'supabase_migrations', 'vault')
order by 1
"""


def test_security_advisor_warnings_are_the_two_intended(db_url: str) -> None:
    """Issue 21 Found 12: with jobkit_user exposed, the linter's SECURITY DEFINER lints find the
    user API's enqueue and cancel for authenticated (they write jobkit's closed tables on the
    caller's behalf, within the checks they make) and nothing else; nothing for anon. The same holds
    over every schema, jobkit's own and [api]'s included."""
    with Database(db_url).session() as s:
        s.execute("create publication supabase_realtime")
    settings = Settings(db_url=db_url, user_api=API, api_schema="jobkit_api")
    deploy(Database(db_url), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    with Database(db_url).session() as s:
        everything = [r["nspname"] for r in s.all("select nspname from pg_namespace")]
        for exposed in (["public", "graphql_public", USER, "jobkit_api"], everything):
            found = {role: [r["function"] for r in s.all(DEFINER_LINT, {"role": role, "exposed": exposed})]
                     for role in ("anon", "authenticated")}
            assert found == {"anon": [], "authenticated": [f"{USER}.cancel(p_id uuid)",
                                                           f"{USER}.enqueue(p_type text, p_payload jsonb)"]}
        # The lint can fail: a definer function granted to authenticated by hand is found.
        s.execute(f"grant execute on function {USER}.sync_job() to authenticated")
        found_now = [r["function"] for r in s.all(DEFINER_LINT, {"role": "authenticated", "exposed": [USER]})]
        assert f"{USER}.sync_job()" in found_now
