"""The attempt, typed once (issue 22, item 3): its outcomes are job_history's words, a drain counts
each of them in one place, and its constants are defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from jobkit.retries import RateLimited
from jobkit.worker.attempt import Outcome, Raised, Returned
from jobkit.worker.outcomes import DrainSummary

ROOT = Path(__file__).resolve().parents[2]


def test_what_job_history_records_of_a_worker_attempt_is_an_outcome() -> None:
    """job_attempts.outcome's check lists what the database records; all but the sweep's
    lease_expired are outcomes a worker's attempt reaches, spelled the same."""
    schema = (ROOT / "sql" / "schema" / "tables.sql").read_text()
    check = re.search(r"outcome\s+text not null\s+check \(outcome in \(([^)]*)\)", schema)
    assert check is not None
    recorded = set(re.findall(r"'([a-z_]+)'", check.group(1)))
    assert recorded - {"lease_expired"} <= {o.value for o in Outcome}
    assert {"completed", "retry", "failed", "snoozed", "released", "cancelled"} <= recorded


@pytest.mark.parametrize("outcome, counter", [
    (Outcome.COMPLETED, "completed"), (Outcome.RETRY, "failed"), (Outcome.FAILED, "failed"),
    (Outcome.SNOOZED, "snoozed"), (Outcome.RELEASED, "released"), (Outcome.CANCELLED, "cancelled"),
    (Outcome.LOST, "lost"), (Outcome.UNRECORDED, None),
])
def test_a_drain_counts_each_outcome_once(outcome: Outcome, counter: str | None) -> None:
    summary = DrainSummary("t")
    summary.count(outcome, 2)
    counts = {k: v for k, v in summary.as_dict().items() if isinstance(v, int) and v}
    assert counts == ({counter: 2} if counter else {})


def test_how_a_handler_ended_is_typed() -> None:
    limited = RateLimited(retry_after=3)
    assert Raised(limited).snooze is limited and Raised(ValueError("x")).snooze is None
    assert Returned('{"a":1}').result == '{"a":1}'
    assert [o for o in Outcome if o.failed] == [Outcome.FAILED, Outcome.UNRECORDED]


def test_the_attempts_constants_are_defined_once() -> None:
    """UNKNOWN_LEASE (the lease of a job no handler here serves) was defined in drain.py and in
    recording.py; MAX_ERROR, MAX_RESULT_BYTES likewise must have one home each."""
    homes: dict[str, list[str]] = {}
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id in ("UNKNOWN_LEASE", "MAX_ERROR", "MAX_RESULT_BYTES"):
                    homes.setdefault(t.id, []).append(str(path.relative_to(ROOT)))
    assert homes == {"UNKNOWN_LEASE": ["toolkit/worker/handler.py"], "MAX_ERROR": ["toolkit/worker/outcomes.py"],
                     "MAX_RESULT_BYTES": ["toolkit/worker/outcomes.py"]}
