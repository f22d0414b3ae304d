"""What the docs' placeholders do when copied as written (issue 26): ``{...}`` as a payload and
``...`` as a job of enqueue_many are one-line ConfigErrors naming the fix, never a raw
AttributeError from deep inside, and nothing is sent (no database is involved)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jobkit
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobkit.enqueue import check_job, check_jobs
from jobkit.exceptions import ConfigError


@pytest.mark.parametrize("job", [..., {"type": "send_email"}, None])
def test_a_job_that_is_not_a_newjob_is_refused_with_a_hint(job: Any) -> None:
    with pytest.raises(ConfigError, match="must be a jobkit.NewJob") as refused:
        check_job(job)
    assert "jobkit.NewJob(type, payload)" in refused.value.hint


@pytest.mark.parametrize("payload", [{...}, {1, 2}, object(), b"bytes"])
def test_a_payload_that_is_not_json_is_refused_with_a_hint(payload: Any) -> None:
    with pytest.raises(ConfigError, match="the payload of a send_email job must be JSON"):
        check_job(jobkit.NewJob("send_email", payload))


def test_enqueue_many_refuses_the_placeholder_before_connecting() -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/none"  # never reached: the check comes first
    with pytest.raises(ConfigError):
        jobkit.enqueue_many(unreachable, [jobkit.NewJob("send_email", {"to": "a@example.com"}), ...])


@pytest.mark.parametrize("payload", [{"a": 1}, [1], "s", 1, 1.5, True, None])
def test_json_payloads_pass(payload: Any) -> None:
    assert check_job(jobkit.NewJob("send_email", payload)).payload == payload


def test_a_batch_checks_each_job_as_check_job_does() -> None:
    """check_jobs lets a plain job through with one comparison and checks each type name once: a
    bad name, a bad payload, a bad field or a windowed job anywhere in the batch is still refused."""
    plain = [jobkit.NewJob("send_email", {"n": n}) for n in range(3)]
    assert check_jobs(plain) == plain
    for bad, message in ((jobkit.NewJob("no spaces", {}), "not a valid name"),
                         (jobkit.NewJob("send_email", {1, 2}), "must be JSON"),
                         (jobkit.NewJob("send_email", {}, priority=2**31), "priority"),
                         (jobkit.NewJob("send_email", {}, debounce=timedelta(seconds=1)), "one job at a time"),
                         (..., "must be a jobkit.NewJob")):
        with pytest.raises(ConfigError, match=message):
            check_jobs([*plain, bad, *plain])


def test_a_batch_turns_a_model_payload_into_json() -> None:
    class Model:
        def model_dump(self, mode: str) -> dict[str, Any]:
            return {"mode": mode}

    assert check_jobs([jobkit.NewJob("send_email", Model())])[0].payload == {"mode": "json"}


_ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), st.binary(max_size=3),
                 st.lists(st.integers(), max_size=2), st.timedeltas(), st.datetimes())


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.one_of(st.just("send_email"), _ANY), st.one_of(st.just({}), _ANY),
                 *[st.one_of(st.none(), _ANY)] * 8))
def test_any_field_of_any_type_is_a_config_error_or_passes(fields: tuple[Any, ...]) -> None:
    """Whatever a caller puts in a NewJob's fields, check_job (one job) and check_jobs (a batch) answer
    with the job or with a ConfigError naming the field: never a TypeError from deep inside."""
    job = jobkit.NewJob(*fields)
    for check in (lambda: check_job(job), lambda: check_jobs([job])):
        try:
            check()
        except ConfigError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["priority", "run_at", "delay", "max_attempts", "idempotency_key",
                                        "concurrency_key", "debounce", "throttle"]),
                       st.one_of(_ANY, st.text(alphabet="0123456789.smhd nan", max_size=6)), max_size=4))
def test_enqueue_arguments_of_any_type_are_a_config_error_or_a_job(kwargs: dict[str, Any]) -> None:
    """jobkit.enqueue's keyword arguments (new_job builds what it sends, before any connection):
    durations as timedelta, seconds or "30s", and anything else a caller passes."""
    from jobkit.enqueue import new_job

    try:
        job = new_job("send_email", {}, **kwargs)
    except ConfigError:
        return
    assert check_job(job) == job
