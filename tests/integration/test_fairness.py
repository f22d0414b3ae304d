"""Concurrency keys and fair claims in the database: keys given or derived from the payload,
per-key and per-type running limits, round-robin claims across keys (the fairness metric), and
the settings deploy syncs from jobkit.toml."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from jobkit.config import KeyTemplate, Settings, TypeConfig, parse_settings
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

LEASE = timedelta(minutes=1)


def configure(db_url: str, **types: TypeConfig) -> None:
    deploy(Database(db_url), Settings(db_url=db_url, types=types), DeployOptions(schedules=False),
           echo=lambda _m: None)


def keyed(template: str | None = None, **limits: Any) -> TypeConfig:
    return TypeConfig(fair=True, concurrency_key=KeyTemplate.parse(template, "t") if template else None,
                      **limits)


def keys_of(session: Session, ids: list[Any]) -> list[str | None]:
    rows = session.all("select id, concurrency_key from jobkit.jobs where id = any(%s)", (ids,))
    by_id = {r["id"]: r["concurrency_key"] for r in rows}
    return [by_id[i] for i in ids]


def test_deploy_syncs_the_key_settings(db_url: str, session: Session) -> None:
    settings = parse_settings({"types": {"report": {"concurrency_key": "tenant:{payload.tenant.id}",
                                                    "max_running_per_key": 2, "max_running": 10}}})
    deploy(Database(db_url), Settings(db_url=db_url, types=settings.types), DeployOptions(schedules=False),
           echo=lambda _m: None)
    row = session.one("select fair, key_template, max_running_per_key, max_running from jobkit.job_types"
                      " where type = 'report'")
    assert row == {"fair": True, "key_template": ["tenant:", ["tenant", "id"]], "max_running_per_key": 2,
                   "max_running": 10}


@pytest.mark.parametrize("toml, error", [
    ({"concurrency_key": "t:{select 1}"}, "is not a field"),
    ({"concurrency_key": "t:{payload.a"}, "is not a field"),
    ({"max_running_per_key": 0}, "max_running_per_key"),
    ({"fair": False, "max_running": 3}, "fair = false"),
])
def test_bad_key_settings_are_refused(toml: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_settings({"types": {"report": toml}})
    with pytest.raises(ConfigError, match="defaults"):
        parse_settings({"defaults": {"max_running": 1}})


def test_keys_given_derived_or_shared(db_url: str, manager: Lifecycle, session: Session) -> None:
    configure(db_url, report=keyed("tenant:{payload.tenant}/{{x}}"), plain_fair=keyed())
    ids = manager.enqueue_many([
        NewJob("report", {"tenant": 42}), NewJob("report", {"tenant": "a b"}), NewJob("report", {}),
        NewJob("report", {"tenant": 1}, concurrency_key="given"),
        NewJob("plain_fair", {}), NewJob("other", {}), NewJob("other", {}, concurrency_key="k"),
    ])
    ids.append(manager.enqueue(NewJob("report", {"tenant": 7})))
    assert keys_of(session, ids) == ["tenant:42/{x}", "tenant:a b/{x}", "tenant:/{x}", "given", "",
                                     None, "k", "tenant:7/{x}"]
    # A type that becomes fair gives its unfinished jobs their keys.
    configure(db_url, report=keyed("tenant:{payload.tenant}/{{x}}"), plain_fair=keyed(), other=keyed())
    assert keys_of(session, ids[5:7]) == ["", "k"]


def test_per_key_and_per_type_limits(db_url: str, manager: Lifecycle) -> None:
    configure(db_url, report=keyed("{payload.k}", max_running_per_key=2, max_running=5))
    manager.enqueue_many([NewJob("report", {"k": k}) for k in "aaaabbbbcccc"])
    first = manager.claim("report", 100, "w1", LEASE)
    assert sorted(j.payload["k"] for j in first) == ["a", "a", "b", "b", "c"]  # 5 in all, 2 a key
    assert manager.claim("report", 100, "w2", LEASE) == []
    manager.complete([(first[0].id, first[0].attempts, None)])
    assert len(manager.claim("report", 100, "w2", LEASE)) == 1  # max_running: one place came free


def test_claims_go_round_robin_from_where_the_last_one_stopped(db_url: str, manager: Lifecycle) -> None:
    configure(db_url, report=keyed("{payload.k}"))
    manager.enqueue_many([NewJob("report", {"k": k, "n": n}) for k in "abcd" for n in range(3)])
    claims = [[j.payload["k"] for j in manager.claim("report", 3, "w", LEASE)] for _ in range(4)]
    assert claims == [["a", "b", "c"], ["d", "a", "b"], ["c", "d", "a"], ["b", "c", "d"]]


def test_round_robin_holds_when_the_number_of_keys_changes(db_url: str, manager: Lifecycle) -> None:
    """A claim fetches as many jobs per key as the previous claim's key count suggests
    (key_cursors.keys); whether that guess is too high or too low, each claim is still a full
    batch in turns: every key's first job, then every key's second, ..."""
    configure(db_url, report=keyed("{payload.k}"))
    manager.enqueue_many([NewJob("report", {"k": k}) for k in "abcdefghij"])  # 10 keys, one job each
    assert sorted(j.payload["k"] for j in manager.claim("report", 10, "w", LEASE)) == list("abcdefghij")
    # Now 2 keys with many jobs: the guess (10 keys, 1 job each) is too low; the claim still fills.
    manager.enqueue_many([NewJob("report", {"k": k, "n": n}) for k in "xy" for n in range(20)])
    assert [j.payload["k"] for j in manager.claim("report", 8, "w", LEASE)] == list("xyxyxyxy")
    # Then 8 more keys: the guess (2 keys, 4 each) is too high; still one job per key first.
    manager.enqueue_many([NewJob("report", {"k": k}) for k in "klmnopqr"])
    batch = [j.payload["k"] for j in manager.claim("report", 10, "w", LEASE)]
    assert len(batch) == 10 and len(set(batch)) == 10, batch


def _starts(db_url: str, job_type: str) -> list[str]:
    """Drain ``job_type`` with a real Drainer (16 slots); the keys in the order their jobs started."""
    started: list[str] = []
    jobs = Registry()

    @jobs.handler(job_type)
    async def run(payload: dict[str, Any], _ctx: Any) -> None:
        started.append(payload["k"])

    async def main() -> None:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            await Drainer(jobs, backend, concurrency=16).drain(job_type, budget=timedelta(seconds=120))
        finally:
            await backend.close()

    asyncio.run(main())
    return started


@pytest.mark.parametrize("fair", [True, False])
def test_fairness_a_small_key_is_not_starved_by_a_big_one(
    db_url: str, manager: Lifecycle, session: Session, fair: bool
) -> None:
    """The metric: with A (10,000 jobs) enqueued before B (100), how many of A's jobs started
    before B's last one did, counted in start order (not time). Fair claims: fewer than 5% of A
    (so fewer than 5% were done). Without them (the contrast): all of A."""
    if fair:
        configure(db_url, report=keyed("{payload.k}"))
    manager.enqueue_many([NewJob("report", {"k": "A"}) for _ in range(10_000)])
    manager.enqueue_many([NewJob("report", {"k": "B"}) for _ in range(100)])
    session.execute("analyze jobkit.jobs")
    started = _starts(db_url, "report")
    assert len(started) == 10_100 and started.count("B") == 100
    last_b = len(started) - 1 - started[::-1].index("B")
    a_before = started[:last_b].count("A")
    print(f"[fairness] fair={fair}: {a_before} of A's 10,000 jobs started before B's last one")
    if fair:
        assert a_before < 500
    else:
        assert a_before == 10_000


def test_one_drainer_finishes_a_backlog_held_back_by_its_key_limits(db_url: str, manager: Lifecycle) -> None:
    """With every key at its limit, a claim finds nothing while this drain's jobs finish. The drain
    must wait for their outcomes and claim again, also when the last outcome was committed while
    that empty claim was in flight, instead of ending with due jobs left (it once ended after the
    first batch: 100 of 2,000 jobs)."""
    configure(db_url, report=keyed("{payload.k}", max_running_per_key=2))
    manager.enqueue_many([NewJob("report", {"k": f"k{i % 50}"}) for i in range(2_000)])
    jobs = Registry()

    @jobs.handler("report")
    async def run(_payload: dict[str, Any], _ctx: Any) -> None:
        return None

    async def main() -> Any:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await Drainer(jobs, backend, concurrency=16).drain("report", budget=timedelta(seconds=120))
        finally:
            await backend.close()

    summary = asyncio.run(main())
    assert (summary.completed, summary.ended) == (2_000, "empty")
