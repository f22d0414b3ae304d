"""enqueue_many's batch tests and parameters in C-level passes (lifecycle.plain_types, Columns;
issue 23, stop 34) decide and send exactly what the per-job Python loops they replaced did: for any
batch, plain_types finds a batch plain exactly when every job passes the per-job test, check_jobs
returns the same jobs or raises the same error, and enqueue_many_params builds the same values."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jobkit
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobkit.enqueue import check_job, check_jobs
from jobkit.exceptions import ConfigError
from jobkit.lifecycle import PLAIN_TAIL, enqueue_many_params, plain_types

NewJob = jobkit.NewJob


def _plain_one(job: Any) -> bool:
    """The per-job test check_jobs applied to each job before (and still applies off the fast path)."""
    return bool(job.__class__ is NewJob and job[2:] == PLAIN_TAIL and job.payload.__class__ in (dict, list))


def _params_by_loops(jobs: Sequence[NewJob]) -> dict[str, Any]:
    """enqueue_many_params as written before stop 34 (one Python loop a column), values only."""
    types = [j.type for j in jobs]

    def nullable(values: list[Any]) -> list[Any] | None:
        return None if all(v is None for v in values) else values

    return {
        "types": types[0] if types and types.count(types[0]) == len(types) else types,
        "payloads": [j.payload for j in jobs],
        "priorities": nullable([j.priority for j in jobs]), "run_ats": nullable([j.run_at for j in jobs]),
        "delays": nullable([j.delay for j in jobs]), "max_attempts": nullable([j.max_attempts for j in jobs]),
        "idempotency_keys": nullable([j.idempotency_key for j in jobs]),
        "concurrency_keys": nullable([j.concurrency_key for j in jobs]),
    }


def _values(params: dict[str, Any]) -> dict[str, Any]:
    return {k: getattr(v, "obj", v) for k, v in params.items() if k != "trace_context"}


_types = st.sampled_from(["send_email", "bench.noop", "b"])
_payloads = st.one_of(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                      st.lists(st.integers(), max_size=2), st.none(), st.integers(), st.text(max_size=2))
_fields = st.fixed_dictionaries({}, optional={
    "priority": st.integers(-5, 5), "run_at": st.just(datetime(2030, 1, 1, tzinfo=UTC)),
    "max_attempts": st.integers(1, 9), "idempotency_key": st.text(min_size=1, max_size=3),
    "delay": st.just(timedelta(seconds=5)), "concurrency_key": st.text(min_size=1, max_size=3)})
_jobs = st.builds(lambda t, p, f: NewJob(t, p, **f), _types, _payloads, _fields)


@settings(max_examples=300, deadline=None)
@given(st.lists(_jobs, max_size=6))
def test_the_batch_tests_and_parameters_match_the_per_job_loops(jobs: list[NewJob]) -> None:
    names = plain_types(jobs)
    assert (names is not None) == (bool(jobs) and all(_plain_one(j) for j in jobs))
    if names is not None:
        assert names == {j.type for j in jobs}
    checked = check_jobs(jobs)
    assert checked == [check_job(j) for j in jobs]
    assert _values(enqueue_many_params(checked)) == _values({**_params_by_loops(checked)})


@pytest.mark.parametrize("odd", [
    ..., None, ("send_email", {}), NewJob("send_email", None), NewJob("send_email", 1),
    NewJob(None, {}, priority=1), NewJob("send_email", {}, priority=0),
])
def test_one_odd_job_takes_the_batch_off_the_fast_path(odd: Any) -> None:
    plain = [NewJob("send_email", {"n": n}) for n in range(3)]
    assert plain_types(plain) == {"send_email"}
    assert plain_types([*plain, odd, *plain]) is None


def test_a_bad_job_in_a_batch_gets_the_error_it_got_alone() -> None:
    plain = [NewJob("send_email", {"n": n}) for n in range(3)]
    for bad in (NewJob("send_email", {}, priority=2**31), NewJob("x y", []), NewJob("send_email", {1})):
        with pytest.raises(ConfigError) as alone:
            check_job(bad)
        with pytest.raises(ConfigError) as batched:
            check_jobs([*plain, bad, *plain])
        assert str(batched.value) == str(alone.value)
