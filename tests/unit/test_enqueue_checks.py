"""What the docs' placeholders do when copied as written (issue 26): ``{...}`` as a payload and
``...`` as a job of enqueue_many are one-line ConfigErrors naming the fix, never a raw
AttributeError from deep inside, and nothing is sent (no database is involved)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jobkit
import pytest
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
