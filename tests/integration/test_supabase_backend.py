"""SupabaseBackend: the worker's lifecycle calls as RPCs to the jobkit_api schema through supabase-py's
async client, against the PostgREST TEST STAND-IN serving the real database (only jobkit_api exposed)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.enqueue import enqueue, enqueue_many
from jobkit.exceptions import ConnectionFailed, DatabaseError
from jobkit.handlers import Permanent, RateLimited, Registry
from jobkit.jobs import NewJob
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends import steps
from jobkit.worker.backends.supabase import SupabaseBackend
from jobkit.worker.drain import Drainer
from jobkit.worker.secrets import set_secrets
from opened import with_backend
from standins.postgrest import create_app, serve

from supabase import Client, ClientOptions, create_client

SERVICE_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0.c2lnbmF0dXJl"
ANON_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoiYW5vbiJ9.c2lnbmF0dXJl"
API = "jobkit_api"
T = TypeVar("T")
pytestmark = pytest.mark.filterwarnings("ignore:The '(timeout|verify)' parameter is deprecated")


@pytest.fixture
def client(base_url: str) -> Iterator[Client]:
    """A sync supabase-py client as service_role."""
    sb = create_client(base_url, SERVICE_KEY, options=ClientOptions(auto_refresh_token=False,
                                                                    persist_session=False))
    yield sb
    sb.postgrest.aclose()  # postgrest-py's sync close keeps the async name


@pytest.fixture
def base_url(db_url: str) -> Iterator[str]:
    deploy(Database(db_url), Settings(db_url=db_url, api_schema=API), DeployOptions(schedules=False),
           echo=lambda _m: None)
    app = create_app(db_url, service_key=SERVICE_KEY, anon_key=ANON_KEY, exposed_schemas=[API])
    with serve(app) as url:
        yield url


def sql(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else []


def run(base_url: str, body: Callable[[SupabaseBackend], Awaitable[T]], key: str = SERVICE_KEY) -> T:
    return with_backend(SupabaseBackend(base_url, key, API), body)


def add(db_url: str, job_type: str, payload: Any, **extra: Any) -> uuid.UUID:
    return enqueue(db_url, job_type, payload, **extra)


def test_drainer_runs_jobs_end_to_end(base_url: str, db_url: str) -> None:
    jobs = Registry()

    @jobs.handler("ok")
    async def ok(payload: Any, ctx: Any) -> Any:
        return payload  # lists, strings and objects come back as the same JSON

    @jobs.handler("beat")
    def beat(payload: Any, ctx: Any) -> bool:
        return bool(ctx.heartbeat())  # extend_leases through the Data API

    @jobs.handler("boom", max_attempts=4)
    def boom(payload: Any, ctx: Any) -> None:
        raise ValueError("smtp said no")

    @jobs.handler("busy")
    async def busy(payload: Any, ctx: Any) -> None:
        raise RateLimited(retry_after=120)

    @jobs.handler("bad")
    async def bad(payload: Any, ctx: Any) -> None:
        raise Permanent("malformed address")

    payloads: list[Any] = [{"n": 1}, [1, [2, 3]], "text", 7, [], {"nested": [{"a": None}]}]
    ids = [add(db_url, "ok", p) for p in payloads]
    beat_id, boom_id, busy_id, bad_id = (add(db_url, t, {}) for t in ("beat", "boom", "busy", "bad"))

    async def body(backend: SupabaseBackend) -> list[Any]:
        assert await backend.due_types() == ["bad", "beat", "boom", "busy", "ok"]
        assert await backend.due_count("ok") == len(payloads)
        drainer = Drainer(jobs, backend, concurrency=4, batch_size=4)
        summaries = [await drainer.drain(t) for t in ("ok", "beat", "boom", "busy", "bad")]
        await drainer.shutdown()
        return [s.as_dict() for s in summaries]

    ok_run, beat_run, boom_run, busy_run, bad_run = run(base_url, body)
    assert (ok_run["claimed"], ok_run["completed"], ok_run["lost"]) == (len(payloads), len(payloads), 0)
    assert (beat_run["completed"], boom_run["failed"], busy_run["snoozed"], bad_run["failed"]) == (1, 1, 1, 1)
    results = dict(sql(db_url, "select id, result from jobkit.jobs where type = 'ok' and status = 'completed'"))
    assert [results[i] for i in ids] == payloads
    rows = {r[0]: r[1:] for r in sql(db_url, "select id, status, attempts, handler_max_attempts, last_error,"
                                               " result, scheduled_for > now() from jobkit.jobs")}
    assert rows[beat_id][:2] == ("completed", 1) and rows[beat_id][4] is True
    status, attempts, max_attempts, error, _, later = rows[boom_id]
    assert (status, attempts, max_attempts, later) == ("pending", 1, 4, True)
    assert "Traceback" in error and "ValueError: smtp said no" in error
    assert rows[busy_id][:2] == ("pending", 0) and rows[busy_id][5] is True  # snoozed: attempt kept
    assert rows[bad_id][0] == "failed" and "Permanent: malformed address" in rows[bad_id][3]
    history = sql(db_url, "select job_id, attempt, outcome from jobkit.job_attempts where job_id in (%s, %s)"
                          " order by job_id = %s", boom_id, bad_id, bad_id)
    assert history == [(boom_id, 1, "retry"), (bad_id, 1, "failed")]


def test_claim_release_and_fencing(base_url: str, db_url: str) -> None:
    first, second = add(db_url, "t", {"i": 1}, priority=5), add(db_url, "t", {"i": 2})

    async def body(backend: SupabaseBackend) -> None:
        claimed = await backend.claim("t", 10, "w1", timedelta(seconds=30), None, None)
        assert [j.id for j in claimed] == [first, second]
        job = claimed[0]
        assert (job.type, job.attempts, job.max_attempts, job.priority, job.payload, job.idempotency_key) == (
            "t", 1, 3, 5, {"i": 1}, None)
        [(status, worker, lease)] = sql(db_url, "select status, worker_id, lease_expires_at - started_at"
                                        " from jobkit.jobs where id = %s", first)
        assert (status, worker) == ("processing", "w1")
        assert timedelta(seconds=25) < lease <= timedelta(seconds=30)
        assert await backend.extend([(first, 1), (second, 2)], timedelta(minutes=5)) == {first}
        assert await backend.release([(second, 1)]) == {second}
        assert await backend.complete([(second, 1, '"late"')]) == set()  # fenced: no longer claimed
        assert await backend.snooze(second, 1, timedelta(seconds=5)) is False
        assert await backend.fail([]) == {}
        assert await backend.claim("t", 10, "w2", timedelta(seconds=30), None, 7) != []

    run(base_url, body)
    assert sql(db_url, "select status, attempts, worker_id from jobkit.jobs where id = %s", second) == [
        ("processing", 1, "w2")]


def test_rate_limit_tokens(base_url: str, db_url: str) -> None:
    sql(db_url, "insert into jobkit.rate_limits(key, rate, burst, tokens) values ('k', 1, 2, 2)")
    for i in range(3):
        add(db_url, "limited", {"i": i})

    async def body(backend: SupabaseBackend) -> None:
        assert await backend.token_wait("k") == 0.0
        assert await backend.take_tokens("k", 5) == 2
        assert await backend.take_tokens("k", 1) == 0
        assert 0.5 < await backend.token_wait("k") <= 1.0
        assert await backend.take_tokens("unknown", 3) == 3 and await backend.token_wait("unknown") == 0.0
        sql(db_url, "update jobkit.rate_limits set tokens = 2, updated_at = clock_timestamp()")
        assert len(await backend.claim("limited", 10, "w", timedelta(seconds=30), "k", None)) == 2
        assert await backend.claim("limited", 10, "w", timedelta(seconds=30), "k", None) == []
        assert await backend.due_count("limited") == 1

    run(base_url, body)


def test_worker_keys_next_due_and_ping(base_url: str, db_url: str) -> None:
    assert run(base_url, lambda b: b.worker_keys()) == []
    secret = "s3cret-" + uuid.uuid4().hex
    set_secrets(Database(db_url), Settings(db_url=db_url), url=None, secret=secret)
    assert run(base_url, lambda b: b.worker_keys()) == [secret]
    assert run(base_url, lambda b: b.next_due("t")) is None
    add(db_url, "t", {})
    sql(db_url, "update jobkit.jobs set scheduled_for = now() + interval '30 seconds'")
    assert 25 < run(base_url, lambda b: b.next_due("t")) <= 30
    assert run(base_url, lambda b: b.ping()) is None


def test_a_data_api_worker_records_the_types_it_serves(base_url: str, db_url: str) -> None:
    run(base_url, lambda b: b.record_types(["resize", "thumbnail", "resize"]))
    run(base_url, lambda b: b.record_types(["resize"]))  # a second start: the same rows
    assert sql(db_url, "select type from jobkit.known_types order by 1") == [("resize",), ("thumbnail",)]


def test_enqueue_with_a_sync_supabase_client(client: Client, db_url: str) -> None:
    one = enqueue(client, "email", {"to": "a@b.c"}, priority=2)
    run_at = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [NewJob("email", [1, 2]), NewJob("sms", "hi", priority=7, max_attempts=9),
            NewJob("email", {"k": 1}, idempotency_key="key-1"), NewJob("email", {}, run_at=run_at),
            NewJob("email", {"again": True}, idempotency_key="key-1")]
    ids = enqueue_many(client, jobs)
    assert len(ids) == 5 and len(set(ids)) == 4 and ids[4] == ids[2]
    rows = {r[0]: r[1:] for r in sql(db_url, "select id, type, payload, priority, max_attempts, scheduled_for,"
                                               " idempotency_key from jobkit.jobs")}
    assert rows[one][:3] == ("email", {"to": "a@b.c"}, 2)
    assert [rows[i][:2] for i in ids] == [("email", [1, 2]), ("sms", "hi"), ("email", {"k": 1}),
                                          ("email", {}), ("email", {"k": 1})]
    assert rows[ids[1]][2:4] == (7, 9) and rows[ids[3]][4] == run_at and rows[ids[2]][5] == "key-1"
    assert enqueue_many(client, []) == []


def test_anon_key_and_errors_are_database_errors(base_url: str, db_url: str) -> None:
    job_id = add(db_url, "t", {})

    async def anon(backend: SupabaseBackend) -> None:
        await backend.claim("t", 10, "w", timedelta(seconds=30), None, None)

    with pytest.raises(DatabaseError) as error:
        run(base_url, anon, key=ANON_KEY)
    assert "42501" in error.value.message and "permission denied" in error.value.message
    assert "service_role" in error.value.hint and ANON_KEY not in str(error.value)
    assert sql(db_url, "select status, attempts from jobkit.jobs where id = %s", job_id) == [("pending", 0)]

    with pytest.raises(DatabaseError) as error:
        run(base_url, lambda b: b.due_count("t"), key="not-a-key")
    assert "Invalid API key" in error.value.message

    bad = SupabaseBackend(base_url, SERVICE_KEY, "jobkit")

    async def call_unexposed() -> None:
        await bad.open()
        try:
            await bad.due_types()
        finally:
            await bad.close()

    with pytest.raises(DatabaseError) as error:
        asyncio.run(call_unexposed())
    assert "PGRST106" in error.value.message and "Exposed schemas" in error.value.hint
    assert "\n" not in error.value.message and SERVICE_KEY not in str(error.value) + repr(bad)

    with pytest.raises(DatabaseError) as error:
        asyncio.run(SupabaseBackend(base_url, SERVICE_KEY).due_types())
    assert "not open" in error.value.message
    with pytest.raises(ConnectionFailed) as failed:
        run("http://127.0.0.1:9", lambda b: b.due_types())
    assert "cannot reach the Data API at http://127.0.0.1:9" in failed.value.message
    assert SERVICE_KEY not in str(failed.value)


def test_api_functions_are_for_service_role_only(base_url: str, db_url: str) -> None:
    # The first api.sql took jsonb[] (list values were mangled by json_to_record), and the wrappers
    # had names other than their steps': a redeploy drops those.
    sql(db_url, "create function jobkit_api.complete_jobs(uuid[], int[], jsonb[]) returns setof uuid"
                " language sql as 'select null::uuid where false'")
    sql(db_url, "create function jobkit_api.next_due_in(text) returns float8 language sql as 'select 1.0'")
    deploy(Database(db_url), Settings(db_url=db_url, api_schema=API), DeployOptions(schedules=False),
           echo=lambda _m: None)
    rows = sql(db_url, "select p.oid::regprocedure::text, has_function_privilege('anon', p.oid, 'execute'),"
                       " has_function_privilege('authenticated', p.oid, 'execute'),"
                       " has_function_privilege('service_role', p.oid, 'execute')"
                       " from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = %s",
               API)
    names = {r[0].split("(")[0] for r in rows}
    assert names == {f"{API}.{fn}" for fn in steps()}  # one wrapper a lifecycle step, named as the step
    assert len(rows) == len(names)  # no stale overloads
    assert all(r[1:] == (False, False, True) for r in rows), rows
    assert sql(db_url, "select has_schema_privilege('anon', %s, 'usage'),"
                       " has_schema_privilege('service_role', %s, 'usage')", API, API) == [(False, True)]


def test_enqueue_wait_true_through_the_data_api(base_url: str, db_url: str, client: Client) -> None:
    """enqueue(..., wait=True) with a supabase-py client: enqueue_many and then job_state over RPC
    (polled: PostgREST has no LISTEN) until a real worker process completes or fails the job."""
    from jobkit import JobFailed, Status, wait
    from workers import Worker

    worker = Worker(db_url, "--listen")
    try:
        done = enqueue(client, "e2e.ok", {"via": "rpc"}, api_schema=API, wait=True, timeout=30)
        assert (done.status, done.result) == (Status.COMPLETED, {"echo": {"via": "rpc"}, "attempt": 1})
        failing = enqueue(client, "e2e.fail", {}, api_schema=API)
        with pytest.raises(JobFailed) as failed:
            wait(client, failing, api_schema=API, timeout=30)
        assert failed.value.status == Status.FAILED and "attempt 2" in (failed.value.error or "")
    finally:
        worker.proc.kill()
        worker.proc.communicate(timeout=10)


def test_wait_on_a_flow_with_a_sync_supabase_client(client: Client, db_url: str) -> None:
    """jobkit.wait(client, run): flow_state over RPC, polled, until every job of the flow ended."""
    import json

    from jobkit import Flow, WaitTimeout, flow, wait, wait_flow
    from jobkit.exceptions import NotFound
    from jobkit.lifecycle import Lifecycle

    graph = Flow("rpc")
    first = graph.add("rpc.a", {"n": 1})
    graph.add("rpc.b", {"n": 2}, after=[first])
    ran = flow(client, graph, api_schema=API)
    with pytest.raises(WaitTimeout, match="2 of 2 jobs not ended: 1 blocked, 1 pending"):
        wait(client, ran, api_schema=API, timeout=0)
    with Database(db_url).session() as session:
        life = Lifecycle(session)
        for job_type in ("rpc.a", "rpc.b"):
            [c] = life.claim(job_type, 1, "w", timedelta(minutes=1))
            life.complete([(c.id, c.attempts, json.dumps(c.payload))])
    done = wait(client, ran, api_schema=API, timeout=30, poll=0.05)
    assert [(j.id, j.result) for j in done.jobs] == [(ran.job_ids[0], {"n": 1}), (ran.job_ids[1], {"n": 2})]
    with pytest.raises(NotFound, match="no flow"):
        wait_flow(client, uuid.uuid4(), api_schema=API, timeout=1)
