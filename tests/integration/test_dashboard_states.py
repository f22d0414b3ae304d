"""The dashboard's state bar, filter totals, confirmation sample, stale types and "run now" (issue
27), against a real seeded database: the counts are the database's, the estimates are labelled,
and every count reads an index of its state."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dashboard_seed import hold_state_changing_schedules, schedule_built_ins, seed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.cron import runnow
from jobkit.cron.pg_cron import CronJobs
from jobkit.dashboard import Dashboard, data
from jobkit.dashboard.filters import STATES, JobFilter
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops import operate
from jobkit.queries import queries
from starlette.testclient import TestClient

HTML = {"accept": "text/html"}
TYPES = ("send_email", "resize_image", "sync_crm")


@pytest.fixture
def seeded(db_url: str) -> str:
    schedule_built_ins(db_url)
    hold_state_changing_schedules(db_url)
    seed(db_url, per_state=20)
    return db_url


@pytest.fixture
def client(seeded: str) -> Iterator[TestClient]:
    dashboard = Dashboard(seeded, Settings(db_url=seeded))
    with TestClient(dashboard.app, base_url="http://127.0.0.1", follow_redirects=False) as c:
        yield c
    dashboard.close()


def counted(url: str, job_type: str | None = None) -> dict[str, int]:
    with Database(url).session() as s:
        rows = s.all("select status, count(*) as n from jobkit.jobs where %(t)s::text is null or type = %(t)s "
                     "group by status", {"t": job_type})
    return {state: next((int(r["n"]) for r in rows if r["status"] == state), 0) for state in STATES}


def csrf(client: TestClient, path: str) -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', client.get(path, headers=HTML).text)
    assert found
    return found.group(1)


def test_states_are_every_state_the_check_allows(db_url: str) -> None:
    with Database(db_url).session() as s:
        text = s.scalar("select pg_get_constraintdef(oid) from pg_constraint "
                        "where conrelid = 'jobkit.jobs'::regclass and conname = 'jobs_status_check'")
    array = re.search(r"'\{([a-z,]+)\}'::text\[\]", text)  # 0023: = any of one array constant
    allowed = set(array.group(1).split(",")) if array else set(re.findall(r"'(\w+)'::text", text))
    assert allowed == set(STATES) and len(STATES) == 8, text


@pytest.mark.parametrize("job_type", [None, "resize_image"])
def test_state_counts_are_the_databases(seeded: str, job_type: str | None) -> None:
    with Database(seeded).session() as s:
        s.execute("update jobkit.jobs set status = 'waiting' where id in (select id from jobkit.jobs "
                  "where status = 'pending' and type = 'resize_image' limit 3)")
        found = {c.state: c.total for c in data.state_counts(s, "jobkit", job_type)}
    want = counted(seeded, job_type)
    assert {state: t.n for state, t in found.items()} == want
    assert all(t.exact for t in found.values())
    assert want["waiting"] == 3 and want["blocked"] == 0 and want["completed"] > 0


def test_beyond_the_bound_an_estimate_and_says_so(seeded: str) -> None:
    with Database(seeded).session() as s:
        before = {c.state: c.total for c in data.state_counts(s, "jobkit", None, bound=50)}
        assert before["completed"].exact is False and before["completed"].n is None  # no statistics yet
        assert "no statistics" in before["completed"].how and before["completed"].text == "50+"
        s.execute("analyze jobkit.jobs")
        after = {c.state: c.total for c in data.state_counts(s, "jobkit", None, bound=50)}
        typed = {c.state: c.total for c in data.state_counts(s, "jobkit", "send_email", bound=10)}
    exact = counted(seeded)
    for state, total in after.items():
        if exact[state] <= 50:
            assert total.exact and total.n == exact[state], state
        else:  # an estimate, never below what was counted, labelled as one
            assert not total.exact and total.n is not None and total.n > 50, state
            assert total.text.startswith("≈") and "estimate" in total.how
            assert abs(total.n - exact[state]) <= exact[state] * 0.5 + 51, (state, total.n, exact[state])
    assert not typed["completed"].exact and typed["completed"].n is not None and typed["completed"].n > 10


def test_every_state_count_reads_an_index(seeded: str) -> None:
    """With sequential scans priced out, no count of the state bar reads jobs sequentially: each has
    an index of its state (the planner picks the cheapest path; a plan with a Seq Scan on jobs
    would mean there is none)."""
    with Database(seeded).session() as s:
        s.execute("set enable_seqscan = off")
        for job_type in (None, "send_email"):
            plan = s.all("explain " + queries("jobkit")["dash_state_counts"], {"type": job_type, "bound": 10_001})
            text = "\n".join(r["QUERY PLAN"] for r in plan)
            assert "Seq Scan" not in text, text
            for index in ("jobs_claim_idx", "jobs_lease_idx", "jobs_finished_idx", "jobs_failed_idx",
                          "jobs_state_idx"):
                assert index in text, (index, text)


def test_filter_total_exact_then_estimated(seeded: str) -> None:
    with Database(seeded).session() as s:
        flt = JobFilter.parse({"type": "sync_crm", "status": "dead"})
        page = data.jobs_page(s, "jobkit", flt, None)
        total = data.filter_total(s, "jobkit", flt, page, first_page=True)
        assert total.exact and total.n == 20 == len(page.rows)
        every = JobFilter()
        page = data.jobs_page(s, "jobkit", every, None)
        exact = data.filter_total(s, "jobkit", every, page, first_page=True)
        s.execute("analyze jobkit.jobs")
        estimated = data.filter_total(s, "jobkit", every, page, first_page=True, bound=100)
    assert exact.exact and exact.n == sum(counted(seeded).values())
    assert not estimated.exact and estimated.n is not None and estimated.n > 100
    assert estimated.n == pytest.approx(exact.n, rel=0.2) and "estimate" in estimated.how


def test_jobs_page_shows_the_state_bar_and_the_total(client: TestClient, seeded: str) -> None:
    page = client.get("/jobs?type=sync_crm", headers=HTML).text
    bar = dict(re.findall(r'data-state="(\w+)" data-count="(\d+)" data-exact="true"', page))
    assert {k: int(v) for k, v in bar.items()} == counted(seeded, "sync_crm")
    assert 'href="/jobs?type=sync_crm&amp;status=dead"' in page
    total = re.search(r'id="total-count">([\d,]+)<', page)
    assert total and int(total.group(1).replace(",", "")) == sum(counted(seeded, "sync_crm").values())
    assert "where type is sync_crm" in page
    live = client.get("/fragments/jobs?type=sync_crm&status=dead", headers=HTML)
    assert live.status_code == 200 and "<html" not in live.text
    assert len(re.findall(r'<tr data-id="', live.text)) == 20


def test_confirm_page_in_words_with_a_sample(client: TestClient, seeded: str) -> None:
    token = csrf(client, "/jobs")
    page = client.post("/actions/confirm", data={"csrf": token, "verb": "retry", "scope": "filter",
                                                 "type": "send_email", "status": "dead",
                                                 "error": "refused"}).text
    assert "every job where type is send_email and status is dead and last error contains &#39;refused&#39;" in page
    with Database(seeded).session() as s:
        want = [str(r["id"]) for r in s.all("select id from jobkit.jobs where type = 'send_email' and status = 'dead' "
                                            "order by created_at, id limit 10")]
    sample = re.search(r'<table class="grid jobs" id="sample">(.*?)</table>', page, re.S)
    assert sample and re.findall(r'<a href="/jobs/([0-9a-f-]{36})"', sample.group(1)) == want
    assert 'id="confirm-count">20<' in page and "The first 10 of them" in page
    assert 'class="here" aria-current="page">Jobs<' in page  # the Jobs tab, not the audit log's


def test_the_operator_api_describes_and_samples_for_the_cli_too(seeded: str) -> None:
    op = operate.Operation("delete", None, JobFilter.parse({"type": "sync_crm", "payload": '{"state": "dead"}'}))
    assert op.describe() == "every job where type is sync_crm and payload contains '{\"state\": \"dead\"}'"
    with Database(seeded).session() as s:
        sample = operate.sample(s, "jobkit", op, limit=3)
        ids = operate.Operation("retry", tuple(r["id"] for r in sample))
        again = operate.sample(s, "jobkit", ids)
    assert len(sample) == 3 and {r["type"] for r in sample} == {"sync_crm"}
    assert [r["id"] for r in again] == [r["id"] for r in sample]  # dead jobs retry: all three
    assert ids.describe() == "3 selected jobs"


def test_types_without_handler_and_recent_jobs_are_folded_away(client: TestClient, seeded: str) -> None:
    with Database(seeded).session() as s:
        life = Lifecycle(s)
        typo = life.enqueue(NewJob("sned_email", {"to": "x"}))
        s.execute("update jobkit.jobs set scheduled_for = now() - interval '3 days', "
                  "created_at = now() - interval '3 days' where id = %s", (typo,))
        life.enqueue(NewJob("new_type_today", {"to": "x"}))  # recent: stays on the overview
        s.execute("insert into jobkit.known_types (type) values ('served_long_ago')")
        old = life.enqueue(NewJob("served_long_ago", {}))
        s.execute("update jobkit.jobs set scheduled_for = now() - interval '3 days' where id = %s", (old,))
        stale = data.stale_types(s, "jobkit", ["sned_email", "new_type_today", "served_long_ago", "send_email"],
                                 set())
        declared = data.stale_types(s, "jobkit", ["sned_email"], {"sned_email"})
    assert stale == {"sned_email"} and declared == set()
    page = client.get("/", headers=HTML).text
    folded = page[page.index('id="stale-types"'):]
    assert 'data-type="sned_email"' in folded and 'data-type="new_type_today"' not in folded
    assert 'id="clean-sned_email"' in folded
    token = csrf(client, "/")
    confirm = client.post("/actions/confirm", data={"csrf": token, "verb": "delete", "scope": "filter",
                                                    "type": "sned_email"}).text
    assert 'id="confirm-count">1<' in confirm


def _oneoffs(url: str) -> list[dict[str, Any]]:
    with Database(url).with_dbname("postgres").session() as s:
        return s.all("select jobid, jobname, schedule, command, database from cron.job "
                     "where jobname like 'jobkit:%%now:%%' and database = current_database() or "
                     "jobname like %(like)s", {"like": f"jobkit:{url.rsplit('/', 1)[1].split('?')[0]}.jobkit:now:%"})


def test_run_now_schedules_a_one_off_and_audits_it(client: TestClient, seeded: str) -> None:
    settings = Settings(db_url=seeded)
    cron = CronJobs(Database(seeded), settings)
    target = cron.find("sweep-stuck")
    assert target is not None
    token = csrf(client, "/schedules")
    response = client.post("/schedules/run", data={"csrf": token, "name": "sweep-stuck"})
    assert response.status_code == 303 and response.headers["location"] == "/schedules?queued=sweep-stuck"
    oneoffs = [j for j in cron.every() if j.name.startswith(runnow.MARK)]
    assert [j.name for j in oneoffs] == [f"now:{target.jobid}"]
    job = oneoffs[0]
    assert job.command.endswith(target.command) and job.database == target.database
    minute, hour, day, month, dow = job.schedule.split()
    assert dow == "*" and 1 <= int(day) <= 31 and 1 <= int(month) <= 12
    runs_at = datetime.now(UTC).replace(second=0, microsecond=0)
    assert int(minute) in {(runs_at + timedelta(minutes=k)).minute for k in (1, 2)} and int(hour) in range(24)
    assert [j.name for j in cron.list()] == [j.name for j in cron.list() if runnow.MARK not in j.name]
    page = client.get("/schedules?queued=sweep-stuck", headers=HTML).text
    assert 'id="queued"' in page and "run queued" in page
    again = client.post("/schedules/run", data={"csrf": token, "name": "sweep-stuck"})  # the same one-off
    assert again.status_code == 303 and len([j for j in cron.every() if j.name.startswith(runnow.MARK)]) == 1
    with Database(seeded).session() as s:
        rows = s.all("select actor, action, target from jobkit.audit_log order by id")
    assert [r["action"] for r in rows] == ["run_schedule", "run_schedule"]
    assert rows[0]["target"]["schedule"] == "sweep-stuck" and rows[0]["target"]["cron_job"].endswith(job.name)
    missing = client.post("/schedules/run", data={"csrf": token, "name": "no-such"})
    assert missing.status_code == 404 and "no schedule" in missing.text


def test_sweep_removes_one_offs_whose_minute_passed(seeded: str) -> None:
    settings = Settings(db_url=seeded)
    cron = CronJobs(Database(seeded), settings)
    target = cron.find("sweep-stuck")
    assert target is not None
    with Database(seeded).session() as s:
        runnow.run_now(s, settings, cron, "sweep-stuck", "tester")
    assert runnow.sweep(cron) == 0  # its minute is still to come
    with Database(seeded).with_dbname("postgres").session() as s:
        s.execute("update cron.job set schedule = %s where jobname like %s",
                  (_minutes_ago(10), f"%now:{target.jobid}"))
    assert runnow.sweep(cron) == 1
    assert not [j for j in cron.every() if j.name.startswith(runnow.MARK)]


def _minutes_ago(n: int) -> str:
    at = datetime.now(UTC) - timedelta(minutes=n)
    return f"{at.minute} {at.hour} {at.day} {at.month} *"


def test_minute_passed() -> None:
    now = datetime(2026, 1, 1, 0, 5)
    assert not runnow.minute_passed("6 0 1 1 *", now)
    assert not runnow.minute_passed("4 0 1 1 *", now)  # within STALE
    assert runnow.minute_passed("1 0 1 1 *", now)
    assert runnow.minute_passed("59 23 31 12 *", now)  # last year's December
    assert runnow.minute_passed("*/5 * * * *", now)  # not one of ours


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=200))
def test_run_now_of_any_name_is_a_4xx(client: TestClient, name: str) -> None:
    """Outside input: a schedule name that is no schedule's is 404 (or 400), never a 500, and
    schedules nothing."""
    token = csrf(client, "/schedules")
    response = client.post("/schedules/run", data={"csrf": token, "name": name})
    if name in {"sweep-stuck", "wake", "prune", "sweep-dead", "prune-cron-history"}:
        return
    assert response.status_code in (400, 404), (name, response.status_code, response.text[:200])
