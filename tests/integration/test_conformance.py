"""The backend conformance suite: the same lifecycle tests, step by step, against every backend the
worker can run on — PostgreSQL directly, the Data API (supabase-py over the PostgREST TEST STAND-IN
serving the real database) and memory. A backend that passes behaves, for the Drainer, like the SQL.

Each test gets a backend configured from one Settings (job type settings and rate limits); for the two
database backends that Settings is deployed, for memory it is handed to the constructor."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from jobkit.config import Backoff, RateLimitConfig, Settings, TypeConfig
from jobkit.connector import Database
from jobkit.exceptions import DatabaseError
from jobkit.jobs import Failure, NewJob, Progress, Status, StepRecord, WaitSpec, WorkerInfo
from jobkit.results import wait_async
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends import Backend
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.backends.supabase import SupabaseBackend
from opened import with_backend
from standins.postgrest import create_app, serve

SERVICE_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0.c2lnbmF0dXJl"
ANON_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoiYW5vbiJ9.c2lnbmF0dXJl"
API = "jobkit_api"
LEASE = timedelta(seconds=30)
T = TypeVar("T")
pytestmark = pytest.mark.filterwarnings("ignore:The '(timeout|verify)' parameter is deprecated")

SETTINGS = Settings(
    api_schema=API,
    types={
        "capped": TypeConfig(max_attempts=2, backoff=Backoff(base=timedelta(seconds=30), jitter=0.0)),
        "limited": TypeConfig(rate_limit="api"),
        "keyed": TypeConfig(fair=True, max_running_per_key=2, max_running=5),
    },
    ratelimits={"api": RateLimitConfig(rate=0.01, burst=3)},
)

Run = Callable[[Callable[[Backend], Awaitable[T]]], T]


@pytest.fixture(params=["postgres", "data_api", "memory"])
def run(request: pytest.FixtureRequest) -> Iterator[Run[Any]]:
    """Runs an async body against a freshly opened backend of the parametrised kind."""
    if request.param == "memory":
        yield _runner(lambda: MemoryBackend(defaults=SETTINGS.defaults, types=SETTINGS.types,
                                            ratelimits=SETTINGS.ratelimits))
        return
    db_url: str = request.getfixturevalue("db_url")
    settings = Settings(**{**SETTINGS.__dict__, "db_url": db_url})
    deploy(Database(db_url), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    if request.param == "postgres":
        yield _runner(lambda: PostgresBackend(db_url))
        return
    app = create_app(db_url, service_key=SERVICE_KEY, anon_key=ANON_KEY, exposed_schemas=[API])
    with serve(app) as url:
        yield _runner(lambda: SupabaseBackend(url, SERVICE_KEY, API))


def _runner(make: Callable[[], Backend]) -> Run[Any]:
    def run(body: Callable[[Backend], Awaitable[T]]) -> T:
        return with_backend(make(), body)

    return run


async def _status(backend: Backend, job_id: uuid.UUID) -> Status:
    job = await backend.get(job_id)
    assert job is not None
    return job.status


def _now() -> datetime:
    return datetime.now(UTC)


# ---- enqueue and claim ---------------------------------------------------------------------------


def test_enqueue_then_claim_hands_over_the_job(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("t", {"n": 1, "s": "é"}, idempotency_key="k1"))
        assert await _status(b, job_id) == Status.PENDING
        [claimed] = await b.claim("t", 10, "w1", LEASE)
        assert (claimed.id, claimed.type, claimed.attempts, claimed.payload, claimed.idempotency_key) == (
            job_id, "t", 1, {"n": 1, "s": "é"}, "k1")
        assert claimed.max_attempts == 3  # the defaults' setting
        job = await b.get(job_id)
        assert job is not None and job.status == Status.PROCESSING and job.worker_id == "w1"
        assert job.lease_expires_at is not None and job.lease_expires_at > _now() + timedelta(seconds=20)
        assert await b.claim("t", 10, "w2", LEASE) == []  # held: nobody else gets it

    run(body)


def test_claim_order_limit_and_due_time(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        low = await b.enqueue(NewJob("t", 1, priority=0))
        high = await b.enqueue(NewJob("t", 2, priority=5))
        later = await b.enqueue(NewJob("t", 3, run_at=_now() + timedelta(hours=1)))
        other = await b.enqueue(NewJob("u", 4))
        assert await b.due_count("t") == 2
        assert [c.id for c in await b.claim("t", 1, "w", LEASE)] == [high]
        assert [c.id for c in await b.claim("t", 5, "w", LEASE)] == [low]
        assert await b.claim("t", 5, "w", LEASE) == []
        assert await _status(b, later) == Status.PENDING and await _status(b, other) == Status.PENDING
        wait = await b.next_due("t")
        assert wait is not None and 3500 < wait <= 3600
        assert await b.next_due("nothing") is None
        assert "u" in await b.due_types()

    run(body)


def test_two_workers_never_claim_the_same_job(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        ids = await b.enqueue_many([NewJob("t", i) for i in range(20)])
        assert len(set(ids)) == 20
        first, second = await asyncio.gather(b.claim("t", 12, "w1", LEASE), b.claim("t", 12, "w2", LEASE))
        got = [c.id for c in first] + [c.id for c in second]
        assert sorted(got) == sorted(ids)  # all twenty, each once

    run(body)


def test_idempotency_key_enqueues_once(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        a = await b.enqueue(NewJob("t", 1, idempotency_key="same"))
        again = await b.enqueue(NewJob("t", 2, idempotency_key="same"))
        assert a == again
        assert len(await b.claim("t", 10, "w", LEASE)) == 1

    run(body)


def test_the_enqueuers_trace_context_comes_back_with_the_claim(run: Run[Any]) -> None:
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}

    async def body(b: Backend) -> None:
        one = await b.enqueue(NewJob("t", 1), trace_context=carrier)
        many = await b.enqueue_many([NewJob("t", 2), NewJob("t", 3, idempotency_key="k")], trace_context=carrier)
        plain = await b.enqueue(NewJob("t", 4))
        claimed = {c.id: c.trace_context for c in await b.claim("t", 10, "w", LEASE)}
        assert claimed == {one: carrier, many[0]: carrier, many[1]: carrier, plain: None}
        job = await b.get(one)
        assert job is not None and job.trace_context == carrier

    run(body)


def test_a_lease_under_five_seconds_is_refused(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        await b.enqueue(NewJob("t", 1))
        with pytest.raises(DatabaseError):
            await b.claim("t", 1, "w", timedelta(seconds=1))

    run(body)


# ---- complete: fenced by the attempt --------------------------------------------------------------


def test_complete_is_fenced_and_stores_the_result(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("t", 1))
        [c] = await b.claim("t", 1, "w", LEASE)
        assert await b.complete([(job_id, c.attempts + 1, "1")]) == set()  # not this attempt's
        assert await b.complete([(job_id, c.attempts, json.dumps({"ok": [1, 2]}))]) == {job_id}
        job = await b.get(job_id)
        assert job is not None and job.status == Status.COMPLETED and job.result == {"ok": [1, 2]}
        assert await b.complete([(job_id, c.attempts, "2")]) == set()  # completes once
        job = await b.get(job_id)
        assert job is not None and job.result == {"ok": [1, 2]}

    run(body)


# ---- fail: retry with backoff, never at once; then failed ------------------------------------------


def test_failure_retries_later_then_fails_at_the_limit(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("capped", 1))
        [c] = await b.claim("capped", 1, "w", LEASE)
        assert c.max_attempts == 2
        assert await b.fail([Failure(job_id, c.attempts, "boom 1")]) == {job_id: "pending"}
        job = await b.get(job_id)
        assert job is not None and job.status == Status.PENDING and job.last_error == "boom 1"
        assert job.scheduled_for > _now() + timedelta(seconds=25)  # the type's 30 s backoff, not now
        assert await b.claim("capped", 1, "w", LEASE) == []
        assert await b.fail([Failure(job_id, c.attempts, "stale")]) == {}  # fenced

    run(body)


def test_retry_in_and_permanent_failures(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        soon, doomed = await b.enqueue_many([NewJob("t", 1), NewJob("t", 2)])
        claimed = {c.id: c for c in await b.claim("t", 2, "w", LEASE)}
        out = await b.fail([
            Failure(soon, claimed[soon].attempts, "later", retry_in=timedelta(minutes=10)),
            Failure(doomed, claimed[doomed].attempts, "never", permanent=True),
        ])
        assert out == {soon: "pending", doomed: "failed"}
        job = await b.get(soon)
        assert job is not None
        assert _now() + timedelta(minutes=9) < job.scheduled_for <= _now() + timedelta(minutes=10)
        job = await b.get(doomed)
        assert job is not None and job.status == Status.FAILED and job.last_error == "never"

    run(body)


def test_attempts_run_out_into_failed(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("t", 1, max_attempts=1))
        [c] = await b.claim("t", 1, "w", LEASE)
        assert c.max_attempts == 1  # the job's own setting wins
        assert await b.fail([Failure(job_id, c.attempts, "once")]) == {job_id: "failed"}

    run(body)


def test_the_claiming_handlers_max_attempts_applies(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("t", 1))
        [c] = await b.claim("t", 1, "w", LEASE, max_attempts=1)
        assert c.max_attempts == 1
        assert await b.fail([Failure(job_id, c.attempts, "x")]) == {job_id: "failed"}

    run(body)


# ---- snooze, extend, release -----------------------------------------------------------------------


def test_snooze_gives_the_attempt_back(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("t", 1))
        [c] = await b.claim("t", 1, "w", LEASE)
        assert not await b.snooze(job_id, c.attempts + 1, timedelta(minutes=5))  # fenced
        assert await b.snooze(job_id, c.attempts, timedelta(minutes=5))
        job = await b.get(job_id)
        assert job is not None and job.status == Status.PENDING and job.attempts == 0
        assert job.scheduled_for > _now() + timedelta(minutes=4)

    run(body)


def test_extend_keeps_only_held_leases(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        held, gone = await b.enqueue_many([NewJob("t", 1), NewJob("t", 2)])
        claimed = {c.id: c for c in await b.claim("t", 2, "w", LEASE)}
        await b.complete([(gone, claimed[gone].attempts, None)])
        kept = await b.extend([(held, claimed[held].attempts), (gone, claimed[gone].attempts)],
                              timedelta(minutes=10))
        assert kept == {held}
        job = await b.get(held)
        assert job is not None and job.lease_expires_at is not None
        assert job.lease_expires_at > _now() + timedelta(minutes=9)
        assert await b.extend([(held, claimed[held].attempts + 1)], timedelta(minutes=10)) == set()

    run(body)


def test_fair_claims_go_round_robin_under_the_key_limits(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        await b.enqueue_many([NewJob("keyed", {"n": n}, concurrency_key=k)
                              for n, k in enumerate("aaabbbccc")] + [NewJob("keyed", {"n": 9})])
        first = await b.claim("keyed", 4, "w", LEASE)
        assert [c.payload["n"] for c in first] == [9, 0, 3, 6]  # keys '', a, b, c in turn
        second = await b.claim("keyed", 10, "w", LEASE)
        assert [c.payload["n"] for c in second] == [1]  # max_running 5 in all
        await b.complete([(first[1].id, first[1].attempts, None)])
        assert [c.payload["n"] for c in await b.claim("keyed", 10, "w", LEASE)] == [4]  # a has 2: b goes on

    run(body)


def test_running_check_names_the_attempts_that_lost_their_job(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        held, done = await b.enqueue_many([NewJob("t", 1), NewJob("t", 2)])
        claimed = {c.id: c for c in await b.claim("t", 2, "w", LEASE)}
        await b.complete([(done, claimed[done].attempts, None)])
        running = [(held, claimed[held].attempts), (done, claimed[done].attempts)]
        assert await b.running_check(running) == {done: "completed"}
        assert await b.running_check([(held, claimed[held].attempts + 1)]) == {held: "processing"}
        assert await b.running_check([]) == {}

    run(body)


def test_steps_are_stored_fenced_and_never_overwritten(run: Run[Any]) -> None:
    """Durable steps (issue 25): steps' records are written, many in one call, only while their
    attempt holds the job; a completed one is read back and never overwritten; a failed one keeps
    its error and is not read back (it runs again)."""
    async def body(b: Backend) -> None:
        job_id, other = await b.enqueue_many([NewJob("t", 1), NewJob("t", 2)])
        claimed = {c.id: c for c in await b.claim("t", 2, "w", LEASE)}
        a, o = claimed[job_id].attempts, claimed[other].attempts
        at = _now()

        def rec(job: uuid.UUID, attempt: int, name: str, n: int, result: Any = None,
                error: str | None = None) -> StepRecord:
            return StepRecord(job, attempt, name, n, None if result is None else json.dumps(result), error, 2, at)

        assert await b.load_steps([job_id, other]) == {}
        held = await b.save_steps([rec(job_id, a, "charge", 1, {"id": "ch_1"}), rec(job_id, a, "charge", 2),
                                   rec(job_id, a, "email", 1, error="ValueError: down"),
                                   rec(other, o + 1, "late", 1, 1),  # not its attempt
                                   rec(other, o, "only", 1, "é")])
        assert held == {(job_id, a), (other, o)}
        assert await b.save_steps([rec(job_id, a, "charge", 1, "again")], hold=True) == {(job_id, a)}
        assert await b.load_steps([job_id, other]) == {
            (job_id, "charge", 1): {"id": "ch_1"}, (job_id, "charge", 2): None, (other, "only", 1): "é"}
        assert await b.save_steps([rec(job_id, a, "email", 1, [1, "é"])]) == {(job_id, a)}
        assert (await b.load_steps([job_id]))[(job_id, "email", 1)] == [1, "é"]  # a failed step's rerun
        await b.complete([(job_id, a, None)])
        assert await b.save_steps([rec(job_id, a, "after", 1, 1), rec(uuid.uuid4(), 1, "gone", 1)]) == set()
        with pytest.raises(DatabaseError, match="name of 1 to 200"):
            await b.save_steps([rec(other, o, "", 1, 1)])
        assert len(await b.load_steps([job_id])) == 3 and await b.save_steps([]) == set()

    run(body)


def test_a_wait_suspends_the_attempt_and_its_outcome_is_replayed(run: Run[Any]) -> None:
    """Waits (issue 25): suspend is fenced and gives the attempt back; the job waits; an emit resolves
    the waits registered before it (its event stored as the wait's step) and a later wait sees it
    (latch); a wait whose time has passed is resolved at once (None); jobs waits resolve when their
    jobs finish; an emit retried with the same id is the same event."""
    async def body(b: Backend) -> None:
        ids = await b.enqueue_many([NewJob("t", i) for i in range(5)])
        claimed = {c.id: c for c in await b.claim("t", 5, "w", LEASE)}
        at = {i: claimed[i].attempts for i in ids}
        shipped = WaitSpec("event:shipped", 1, "event", delay=timedelta(hours=1), events=("shipped",), keys=("42",))
        assert await b.suspend(ids[0], at[ids[0]] + 1, shipped) is None  # fenced
        assert await b.suspend(ids[0], at[ids[0]], shipped) == "waiting"
        job = await b.get(ids[0])
        assert job is not None and job.status == Status.WAITING and job.attempts == 0
        assert await b.claim("t", 5, "w", LEASE) == []
        event_id = await b.emit("shipped", "42", {"carrier": "ups"}, "evt_1")
        assert await b.emit("shipped", "42", {"carrier": "ups"}, "evt_1") == event_id  # retried: the same
        assert await _status(b, ids[0]) == Status.PENDING
        stored = (await b.load_steps([ids[0]]))[(ids[0], "event:shipped", 1)]
        assert stored["data"] == {"carrier": "ups"} and stored["id"] == event_id and stored["generation"] == 1
        assert await b.suspend(ids[1], at[ids[1]], shipped) == "pending"  # latch: emitted before it waited
        assert (await b.load_steps([ids[1]]))[(ids[1], "event:shipped", 1)]["id"] == event_id
        late = WaitSpec("sleep", 1, "sleep", due=_now() - timedelta(seconds=1))
        assert await b.suspend(ids[2], at[ids[2]], late) == "pending"
        assert await b.load_steps([ids[2]]) == {(ids[2], "sleep", 1): None}
        children = WaitSpec("kids", 1, "jobs", job_ids=(ids[4],))
        assert await b.suspend(ids[3], at[ids[3]], children) == "waiting"
        assert await b.complete([(ids[4], at[ids[4]], None)]) == {ids[4]}
        assert await _status(b, ids[3]) == Status.PENDING
        assert (await b.load_steps([ids[3]]))[(ids[3], "kids", 1)] == {"jobs": {str(ids[4]): "completed"}}
        assert {c.id for c in await b.claim("t", 5, "w", LEASE)} == set(ids[:4])
        with pytest.raises(DatabaseError, match="name of 1 to 200"):
            await b.emit("", None, None, None)

    run(body)


def test_progress_is_fenced_and_state_shows_it_with_the_result(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id, other = await b.enqueue_many([NewJob("t", 1), NewJob("t", 2)])
        claimed = {c.id: c for c in await b.claim("t", 2, "w", LEASE)}
        state = await b.state(job_id)
        assert state is not None and state.status == Status.PROCESSING and state.progress is None
        report = {"fraction": 0.25, "done": 1, "total": 4, "message": "one", "data": {"k": [1]}}
        assert await b.progress([(job_id, claimed[job_id].attempts, report),
                                 (other, claimed[other].attempts + 1, {"fraction": 1.0})]) == {job_id}
        assert await b.complete([(job_id, claimed[job_id].attempts, json.dumps({"ok": 1}))]) == {job_id}
        state = await b.state(job_id)
        assert state is not None and (state.status, state.result, state.attempts) == (Status.COMPLETED, {"ok": 1}, 1)
        assert state.progress == Progress(0.25, 1, 4, "one", {"k": [1]})
        assert state.completed_at is not None and state.error is None
        assert (await b.state(other)).progress is None  # type: ignore[union-attr]  # fenced out
        assert await b.progress([(job_id, claimed[job_id].attempts, report)]) == set()  # finished
        assert await b.state(uuid.uuid4()) is None
        assert (await wait_async(b, job_id, timeout=5)).result == {"ok": 1}

    run(body)


def test_release_makes_the_job_claimable_now_without_using_an_attempt(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        job_id = await b.enqueue(NewJob("t", 1))
        [c] = await b.claim("t", 1, "w1", LEASE)
        assert await b.release([(job_id, c.attempts)]) == {job_id}
        assert await b.release([(job_id, c.attempts)]) == set()
        [again] = await b.claim("t", 1, "w2", LEASE)
        assert again.id == job_id and again.attempts == 1

    run(body)


# ---- rate limits ------------------------------------------------------------------------------------


def test_rate_limited_claims_take_tokens(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        await b.enqueue_many([NewJob("limited", i) for i in range(10)])
        assert len(await b.claim("limited", 10, "w", LEASE)) == 3  # the burst
        assert await b.claim("limited", 10, "w", LEASE) == []
        assert await b.token_wait("api") > 1.0  # refills at 0.01/s
        assert await b.take_tokens("api", 5) == 0
        await b.enqueue(NewJob("t", 1))
        assert len(await b.claim("t", 1, "w", LEASE, rate_key=None)) == 1  # other keys are free

    run(body)


def test_ping_answers(run: Run[Any]) -> None:
    async def body(b: Backend) -> None:
        await b.ping()
        assert isinstance(await b.worker_keys(), list)

    run(body)


def test_a_signed_wake_up_is_consumed_once(run: Run[Any]) -> None:
    """The fleet's nonce store (issue 21, Found 4): the first consume wins, every repeat is refused,
    through every backend (the Data API's consume_wake RPC included)."""
    async def body(b: Backend) -> None:
        nonce = uuid.uuid4().hex * 2
        expires = _now() + timedelta(seconds=60)
        assert await b.consume_wake(nonce, expires) is True
        assert await b.consume_wake(nonce, expires) is False
        assert await b.consume_wake(uuid.uuid4().hex * 2, expires) is True
        await b.wake_draining("conformance.wake", timedelta(seconds=3))
        assert await b.wake_idle("conformance.wake") is True

    run(body)


def test_a_worker_beats_leaves_and_comes_back(run: Run[Any], request: pytest.FixtureRequest) -> None:
    """Worker presence (issue 27, 0021) through every backend: a beat registers the row and a second
    refreshes it, a clean stop marks it gone (twice is harmless), a later beat makes it alive again."""
    info = WorkerInfo("conformance:0001", "host", 42, "1.0", "pg_net", 8, ("a", "b"), timedelta(seconds=2),
                      datetime.now(UTC).replace(microsecond=0))
    seen: list[tuple[int, str | None]] = []

    async def body(b: Backend) -> None:
        await b.worker_beat(info, 3)
        await b.worker_beat(info, 5)
        seen.append(_worker(b, request, info.id))
        await b.worker_gone(info.id)
        await b.worker_gone(info.id)
        seen.append(_worker(b, request, info.id))
        await b.worker_beat(info, 1)
        seen.append(_worker(b, request, info.id))

    run(body)
    assert seen == [(5, None), (0, "stopped"), (1, None)]


def _worker(b: Backend, request: pytest.FixtureRequest, worker_id: str) -> tuple[int, str | None]:
    """(running, gone reason) as the backend's store holds the worker's row."""
    if isinstance(b, MemoryBackend):
        _info, running, _at, gone = b.workers[worker_id]
        return running, gone
    with Database(request.getfixturevalue("db_url")).session() as s:
        row = s.one("select running, gone_reason, types, heartbeat, pid from jobkit.workers where id = %(id)s",
                    {"id": worker_id})
    assert row is not None and row["types"] == ["a", "b"] and row["heartbeat"] == timedelta(seconds=2)
    return int(row["running"]), row["gone_reason"]


def test_a_graph_releases_children_as_parents_end_under_each_policy(run: Run[Any]) -> None:
    """Job graphs (issue 25): create_flow blocks children; a completion releases them; a failure
    fails a 'fail' child, cancels a 'cancel' one and releases a 'run' one; parents() reads them."""
    from jobkit.flows import Flow

    async def body(b: Backend) -> None:
        graph = Flow("conformance")
        root = graph.add("g.root", {"n": 1})
        other = graph.add("g.root", {"n": 2})
        both = graph.add("g.kid", {}, after=[root, other])
        strict = graph.add("g.kid", {}, after=[both])
        lenient = graph.add("g.kid", {}, after=[both], on_parent_failure="cancel")
        runs = graph.add("g.kid", {}, after=[(both, "run")])
        flow = await b.create_flow(graph)
        assert len(flow.job_ids) == 6 and await b.claim("g.kid", 10, "w", LEASE) == []
        claimed = await b.claim("g.root", 10, "w", LEASE)
        assert {c.id for c in claimed} == {flow[root], flow[other]}
        await b.complete([(c.id, c.attempts, json.dumps(c.payload)) for c in claimed])
        parents = await b.parents(flow[both])
        assert [(p.id, p.status, p.result, p.on_parent_failure) for p in parents] == [
            (flow[root], "completed", {"n": 1}, "fail"), (flow[other], "completed", {"n": 2}, "fail")]
        [kid] = await b.claim("g.kid", 10, "w", LEASE)
        assert kid.id == flow[both]
        await b.fail([Failure(kid.id, kid.attempts, "boom", permanent=True)])
        states = {i: (await b.state(i)).status.value for i in (flow[strict], flow[lenient], flow[runs])}  # type: ignore[union-attr]
        assert states == {flow[strict]: "failed", flow[lenient]: "cancelled", flow[runs]: "pending"}
        assert await b.parents(flow[root]) == []

    run(body)


def test_a_flow_waited_on_returns_every_jobs_result_once_all_ended(run: Run[Any]) -> None:
    """jobkit.wait on a flow over a worker backend (wait_flow_async polls flow_state): statuses
    only while a job is open, every job's result and error once all ended; no job: NotFound."""
    from jobkit.exceptions import NotFound, WaitTimeout
    from jobkit.flows import Flow
    from jobkit.results import wait_flow_async

    async def body(b: Backend) -> None:
        graph = Flow("waited")
        root = graph.add("w.root", {"n": 1})
        kid = graph.add("w.kid", {"n": 2}, after=[root])
        runs = graph.add("w.kid", {"n": 3}, after=[root], on_parent_failure="run")
        flow = await b.create_flow(graph)
        [claimed] = await b.claim("w.root", 10, "w", LEASE)
        await b.fail([Failure(claimed.id, claimed.attempts, "boom", permanent=True)])
        assert [(s.id, s.status.value, s.error) for s in await b.flow_state(flow.id)] == [
            (flow[root], "failed", None), (flow[kid], "failed", None), (flow[runs], "pending", None)]
        with pytest.raises(WaitTimeout, match="1 of 3 jobs not ended: 1 pending"):
            await wait_async(b, flow, timeout=0)
        [last] = await b.claim("w.kid", 10, "w", LEASE)
        await b.complete([(last.id, last.attempts, json.dumps({"ran": True}))])
        done = await wait_async(b, flow, timeout=5, poll=0.05)
        assert [(j.id, j.status.value, j.result) for j in done.jobs] == [
            (flow[root], "failed", None), (flow[kid], "failed", None), (flow[runs], "completed", {"ran": True})]
        assert done[flow[root]].error == "boom" and done.counts == {"succeeded": 1, "failed": 2}
        assert await b.flow_state(uuid.uuid4()) == []
        with pytest.raises(NotFound, match="no flow"):
            await wait_flow_async(b, uuid.uuid4(), timeout=1)

    run(body)
