"""What the docs' placeholders do when copied as written (issue 26): ``{...}`` as a payload and
``...`` as a job of enqueue_many are one-line ConfigErrors naming the fix, never a raw
AttributeError from deep inside, and nothing is sent (no database is involved)."""

from __future__ import annotations

from typing import Any

import jobkit
import pytest
from jobkit.enqueue import check_job
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
