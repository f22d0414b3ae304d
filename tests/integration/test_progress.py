"""ctx.progress: a handler in a real worker process reporting in a tight loop costs at most a few
writes a second (counted by a trigger on the jobs table), the last report is stored, `jobkit jobs
show` prints it and wait(on_progress=) sees it while the job runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jobkit
import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.connector import Session
from jobkit.jobs import Progress
from jobkit.worker.progress import FLUSH_EVERY
from workers import Worker

SECONDS = 2.0


@pytest.fixture
def writes(session: Session) -> Session:
    """Counts the UPDATEs that changed a job's progress, with the time of each."""
    session.execute("create table progress_writes (job_id uuid, at timestamptz default clock_timestamp())")
    session.execute("""create function count_progress() returns trigger language plpgsql as $$
        begin insert into public.progress_writes (job_id) values (new.id); return null; end $$""")
    session.execute("create trigger count_progress after update on jobkit.jobs for each row "
                    "when (old.progress is distinct from new.progress) execute function count_progress()")
    return session


@pytest.fixture
def worker(db_url: str) -> Iterator[Worker]:
    w = Worker(db_url, "--listen")
    yield w
    w.proc.kill()
    w.proc.communicate(timeout=10)


def test_a_tight_loop_costs_a_few_writes_a_second(db_url: str, writes: Session, worker: Worker) -> None:
    seen: list[Progress] = []
    done = jobkit.enqueue(db_url, "e2e.progress", {"seconds": SECONDS}, wait=True, timeout=60)
    calls, ran = done.result["calls"], done.result["seconds"]
    job_id = done.id
    count = int(writes.scalar("select count(*) from progress_writes where job_id = %(id)s", {"id": job_id}))
    span = float(writes.scalar("select extract(epoch from max(at) - min(at)) from progress_writes"))
    # One write per FLUSH_EVERY at most while it ran, plus the last report when it ended.
    assert 2 <= count <= ran / FLUSH_EVERY + 2, (count, calls, ran)
    assert calls > 50 * count  # the loop called it far more often than the database was written
    assert span <= ran + 1
    assert done.progress == Progress(1.0, calls, calls, "done", {"calls": calls})  # the last report

    job_id = jobkit.enqueue(db_url, "e2e.progress", {"seconds": SECONDS})
    done = jobkit.wait(db_url, job_id, timeout=60, on_progress=seen.append)
    assert len(seen) >= 2 and seen[-1] == done.progress  # while it ran, then the last one
    assert any(p.fraction is not None and p.fraction < 1 for p in seen)

    shown = CliRunner().invoke(cli, ["jobs", "show", str(job_id), "--db-url", db_url])
    assert shown.exit_code == 0 and "progress: 100% (" in shown.output and "done" in shown.output
    as_json = CliRunner().invoke(cli, ["jobs", "show", str(job_id), "--json", "--db-url", db_url])
    assert json.loads(as_json.output)["job"]["progress"]["message"] == "done"


def test_progress_refuses_bad_values() -> None:
    ctx: Any = jobkit.JobContext.__new__(jobkit.JobContext)
    ctx._reported = None
    for bad in (1.5, -0.1, float("nan"), (3, 2), (1, 0), "half", True):
        with pytest.raises(jobkit.JobkitError):
            ctx.progress(bad)
    with pytest.raises(jobkit.JobkitError, match="JSON"):
        ctx.progress(0.5, data={"x": object()})
    ctx.progress((2, 8), "two", {"k": 1})
    assert ctx.reported == {"fraction": 0.25, "done": 2, "total": 8, "message": "two", "data": {"k": 1}}
