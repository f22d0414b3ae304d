"""The dashboard's job page shows a waiting job's open wait (issue 25 item 7, issue 27 item 7):
what it waits for (the event's name and key, or the jobs it waits for with their state) and until
when; once resolved the wait is gone from the page and its outcome is a step of kind wait. Jobs
are made to wait by the real Drainer, as a worker would."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import jobkit
import pytest
from jobkit.config import Settings
from jobkit.connector import Session
from jobkit.dashboard import Dashboard
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from starlette.testclient import TestClient

HTML = {"accept": "text/html"}


def _registry() -> Registry:
    jobs = Registry()

    @jobs.handler("d.event")
    async def waiter(payload: Any, ctx: Any) -> Any:
        got = await ctx.wait_for_event("order.shipped", key=payload["order"], timeout="2h")
        return None if got is None else got.data

    @jobs.handler("d.parent")
    async def parent(payload: Any, ctx: Any) -> Any:
        children = await ctx.step("spawn", lambda: [str(jobkit.enqueue(payload["url"], "d.child", {}))
                                                      for _ in range(3)])
        return sorted((await ctx.wait_for_jobs(children)).values())

    return jobs


def _drain(db_url: str, job_type: str) -> None:
    async def main() -> None:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            await Drainer(_registry(), backend).drain(job_type, budget=timedelta(seconds=20))
        finally:
            await backend.close()
    asyncio.run(main())


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    dashboard = Dashboard(db_url, Settings(db_url=db_url))
    with TestClient(dashboard.app, base_url="http://127.0.0.1", follow_redirects=False) as c:
        yield c
    dashboard.close()


def _section(page: str, section_id: str) -> str | None:
    found = re.search(rf'<section id="{section_id}".*?</section>', page, re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", found.group(0))) if found else None


def test_an_event_wait_shows_what_for_and_until_when(db_url: str, session: Session, client: TestClient) -> None:
    job = Lifecycle(session, "jobkit").enqueue(NewJob("d.event", {"order": "o-17"}))
    _drain(db_url, "d.event")
    assert session.scalar("select status from jobkit.jobs where id = %s", (job,)) == "waiting"
    page = client.get(f"/jobs/{job}", headers=HTML)
    assert page.status_code == 200
    wait = _section(page.text, "job-wait")
    assert wait is not None and "order.shipped" in wait and "o-17" in wait and "times out" in wait, wait
    due = session.scalar("select due from jobkit.job_waits where job_id = %s", (job,))
    assert due.strftime("%Y-%m-%d %H:%M") in page.text  # the exact time on hover

    jobkit.emit(db_url, "order.shipped", key="o-17", data={"carrier": "dhl"})
    _drain(db_url, "d.event")
    assert session.scalar("select status from jobkit.jobs where id = %s", (job,)) == "completed"
    page = client.get(f"/jobs/{job}", headers=HTML)
    assert _section(page.text, "job-wait") is None
    steps = re.search(r'<table class="grid" id="job-steps">.*?</table>', page.text, re.S)
    assert steps is not None and ">wait</span>" in steps.group(0)


def test_a_jobs_wait_lists_the_jobs_with_their_state(db_url: str, session: Session, client: TestClient) -> None:
    job = Lifecycle(session, "jobkit").enqueue(NewJob("d.parent", {"url": db_url}))
    _drain(db_url, "d.parent")
    assert session.scalar("select status from jobkit.jobs where id = %s", (job,)) == "waiting"
    children = [str(r["id"]) for r in session.all("select id from jobkit.jobs where type = 'd.child'")]
    assert len(children) == 3
    wait = _section(client.get(f"/jobs/{job}", headers=HTML).text, "job-wait")
    assert wait is not None and "3 jobs to finish" in wait and "no timeout" in wait, wait
    assert all(c[:8] in wait for c in children) and wait.count("pending") == 3


def test_a_plain_job_has_no_wait_section(session: Session, client: TestClient) -> None:
    job = Lifecycle(session, "jobkit").enqueue(NewJob("d.plain", {}))
    page = client.get(f"/jobs/{job}", headers=HTML)
    assert page.status_code == 200 and _section(page.text, "job-wait") is None
