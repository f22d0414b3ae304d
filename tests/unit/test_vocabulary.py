"""One vocabulary (issue 26): "failed attempts" (retried or final) and "failed jobs" (out of
attempts, dead within five minutes) are distinct words in the CLI's status table and the
dashboard's overview, and durations print as ``2m30s``, not as Python timedeltas or bare seconds."""

from __future__ import annotations

import re
from pathlib import Path

from jobkit.cli.ops import STATUS_COLUMNS, render
from jobkit.ops.status import QueueStatus, TypeStatus
from rich.console import Console

ROOT = Path(__file__).parents[2]


def test_the_status_table_says_failed_attempts_and_dead_jobs() -> None:
    assert "failed attempts 1h" in STATUS_COLUMNS and "dead jobs 1h" in STATUS_COLUMNS
    assert not [c for c in STATUS_COLUMNS if re.fullmatch(r"(failed|dead)( 1h)?", c)]


def test_the_dashboard_overview_says_failed_jobs() -> None:
    page = (ROOT / "toolkit" / "dashboard" / "templates" / "_overview_table.html").read_text()
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    assert "failed jobs" in headers and "dead jobs" in headers
    assert "failed" not in headers and "dead" not in headers


def test_the_status_table_prints_durations_as_2m30s() -> None:
    console = Console(width=250, record=True)
    console.print(render(QueueStatus(types=[TypeStatus("mail", runnable=1, oldest_runnable_s=150.4)])))
    text = console.export_text()
    assert "2m30s" in text and "150s" not in text and "0:02:30" not in text
