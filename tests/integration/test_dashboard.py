"""The dashboard over HTTP (Starlette's TestClient against a real seeded database): every page,
auth and CSRF, read-only, actions by id and by filter with their audit rows, keyset pagination,
payload search, and that no GET changes anything. The real-browser run is tests/browser."""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import jwt
import pytest
from click.testing import CliRunner
from dashboard_seed import hold_state_changing_schedules, schedule_built_ins, seed
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.dashboard import AuthConfig, Dashboard
from jobkit.dashboard.serve import DashboardOptions, check
from jobkit.exceptions import ConfigError, DriftError
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from poll import wait_for
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

TOKEN = "t0ken-for-the-dashboard-tests"
JWT_SECRET = "super-secret-jwt-key-of-the-supabase-project"
PAGES = ["/", "/fragments/overview", "/jobs", "/fragments/jobs", "/fragments/jobs?type=sync_crm&status=dead",
         "/schedules", "/ratelimits", "/triggers", "/actions", "/workers", "/fragments/workers",
         "/jobs?status=dead", "/jobs?payload=%7B%22user_id%22%3A3%7D", "/?window=1d&type=send_email"]
HTML = {"accept": "text/html"}


@pytest.fixture
def seeded(db_url: str) -> str:
    schedule_built_ins(db_url)  # all a deploy would change in the template's copy (no functions re-applied)
    hold_state_changing_schedules(db_url)
    seed(db_url, per_state=20)
    return db_url


@pytest.fixture
def open_client(seeded: str) -> Iterator[TestClient]:
    yield from _client(seeded)


@pytest.fixture
def token_client(seeded: str) -> Iterator[TestClient]:
    yield from _client(seeded, auth=AuthConfig(token=TOKEN))


def _client(url: str, base: str = "http://127.0.0.1", **options: Any) -> Iterator[TestClient]:
    dashboard = Dashboard(url, Settings(db_url=url), **options)
    with TestClient(dashboard.app, base_url=base, follow_redirects=False) as client:
        yield client
    dashboard.close()


def csrf(client: TestClient, path: str = "/jobs") -> str:
    page = client.get(path, headers=HTML)
    found = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def counts(url: str) -> dict[str, int]:
    with Database(url).session() as s:
        return {r["status"]: int(r["n"]) for r in
                s.all("select status, count(*) as n from jobkit.jobs group by status")}


def fingerprint(url: str) -> str:
    """Everything an action could change: jobs, attempts, the audit log, cron jobs' active flags."""
    with Database(url).session() as s:
        parts = [s.scalar(f"select md5(coalesce(string_agg(t::text, ',' order by t::text), '')) from {table} t")
                 for table in ("jobkit.jobs", "jobkit.job_attempts", "jobkit.audit_log", "jobkit.rate_limits",
                               "jobkit.wakeups", "jobkit.settings", "jobkit.secrets")]
    with Database(url).with_dbname("postgres").session() as s:
        # this database's cron jobs (another test's one-off in pg_cron's database may come and go)
        parts.append(str(s.all("select jobid, active from cron.job where database = %s order by jobid",
                               (Database(url).dbname,))))
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def wait_finished(url: str, audit_id: int, timeout: float = 30) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def finished() -> bool:
        with Database(url).session() as s:
            seen["row"] = s.one("select * from jobkit.audit_log where id = %s", (audit_id,))
        return bool(seen["row"] and seen["row"]["finished_at"] is not None)

    wait_for(finished, timeout, f"action {audit_id} finished")
    return dict(seen["row"])


def act(client: TestClient, token: str, **form: Any) -> int:
    """Confirm, then run an action; returns its audit id."""
    confirm = client.post("/actions/confirm", data={"csrf": token, **form})
    assert confirm.status_code == 200, confirm.text
    matched = re.search(r'name="matched" value="(\d+)"', confirm.text)
    assert matched, confirm.text
    run = client.post("/actions/run", data={"csrf": token, "matched": matched.group(1), **form})
    assert run.status_code == 303
    return int(run.headers["location"].rsplit("/", 1)[1])


# ---- pages ------------------------------------------------------------------------------------

def test_every_page_renders_with_security_headers(open_client: TestClient, seeded: str) -> None:
    for path in PAGES + ["/static/htmx.min.js", "/static/dashboard.css"]:
        response = open_client.get(path, headers=HTML)
        assert response.status_code == 200, (path, response.text[:300])
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"  # no-referrer makes Origin "null"
    overview = open_client.get("/", headers=HTML).text
    for job_type in ("send_email", "resize_image", "sync_crm"):
        assert job_type in overview
    job_id = seed_ids(seeded, "dead")[0]
    detail = open_client.get(f"/jobs/{job_id}", headers=HTML)
    assert detail.status_code == 200 and "ConnectionRefusedError" in detail.text
    assert re.search(r"<dt>attempts</dt><dd>\d+/\d+</dd>", detail.text), detail.text[:2000]  # the effective limit
    with Database(seeded).session() as s:  # what ctx.progress stored (0006)
        s.execute("update jobkit.jobs set progress = %(p)s::jsonb where id = %(id)s",
                  {"id": job_id, "p": '{"fraction": 0.4, "done": 4, "total": 10, "message": "row <4>"}'})
    detail = open_client.get(f"/jobs/{job_id}", headers=HTML).text
    assert re.search(r'id="job-progress"><progress max="1" value="0.4"></progress> 40% \(4/10\) row &lt;4&gt;</dd>',
                     detail), detail[:2000]
    assert open_client.get("/jobs/8d5b0a3c-0000-4000-8000-000000000000", headers=HTML).status_code == 404
    assert open_client.get("/jobs/not-a-uuid", headers=HTML).status_code == 400


def seed_ids(url: str, status: str) -> list[str]:
    with Database(url).session() as s:
        return [str(r["id"]) for r in s.all("select id from jobkit.jobs where status = %s order by id", (status,))]


def test_no_get_changes_anything(open_client: TestClient, seeded: str) -> None:
    before = fingerprint(seeded)
    job_id = seed_ids(seeded, "dead")[0]
    for path in PAGES + [f"/jobs/{job_id}", "/actions/1", "/actions/1/progress",
                         "/actions/confirm?verb=delete&scope=filter", "/actions/run?verb=delete&scope=filter",
                         "/schedules/active?name=sweep&active=false", "/schedules/run?name=sweep-stuck",
                         "/logout", "/login"]:
        open_client.get(path, headers=HTML)
    assert fingerprint(seeded) == before


def test_payload_filter_and_keyset_pages(open_client: TestClient, seeded: str) -> None:
    page = open_client.get("/jobs", params={"payload": '{"user_id": 3}'}, headers=HTML).text
    ids = set(re.findall(r'href="/jobs/([0-9a-f-]{36})"', page))
    with Database(seeded).session() as s:
        want = {str(r["id"]) for r in s.all("select id from jobkit.jobs where payload @> '{\"user_id\": 3}'")}
    assert ids == want and len(want) == 7  # one per state of the first type
    bad = open_client.get("/jobs", params={"payload": "{user_id: 3"}, headers=HTML)
    assert bad.status_code == 400 and "not JSON" in bad.text and "hint" in bad.text
    # walk every page of one type: each job exactly once, in created_at desc order
    seen: list[str] = []
    url = "/jobs?type=sync_crm"
    while url:
        text = open_client.get(url, headers=HTML).text
        seen += re.findall(r'href="/jobs/([0-9a-f-]{36})"', text)
        older = re.search(r'id="older" href="([^"]+)"', text)
        url = older.group(1).replace("&amp;", "&") if older else ""
    with Database(seeded).session() as s:
        want_order = [str(r["id"]) for r in s.all(
            "select id from jobkit.jobs where type = 'sync_crm' order by created_at desc, id desc")]
    assert seen == want_order and len(seen) == 140


# ---- actions -----------------------------------------------------------------------------------

def test_retry_every_dead_job_matching_a_filter(open_client: TestClient, seeded: str) -> None:
    before = counts(seeded)
    token = csrf(open_client)
    audit_id = act(open_client, token, verb="retry", scope="filter", type="send_email", status="dead")
    row = wait_finished(seeded, audit_id)
    after = counts(seeded)
    assert row["matched"] == 20 and row["affected"] == 20 and row["error"] is None
    assert row["actor"].startswith("local@") and row["target"] == {"filter": {"type": "send_email", "status": "dead"}}
    assert after["dead"] == before["dead"] - 20 and after["pending"] == before["pending"] + 20
    progress = open_client.get(f"/actions/{audit_id}/progress", headers=HTML).text
    assert 'id="done"' in progress and "hx-trigger" not in progress  # finished: polling stops


def test_bulk_action_runs_in_batches(seeded: str) -> None:
    from jobkit.connector import SessionPool
    from jobkit.dashboard import actions
    from jobkit.dashboard.filters import JobFilter

    pending = counts(seeded)["pending"]
    pool = SessionPool(seeded)
    pool.open()
    try:
        action = actions.Action("cancel", None, JobFilter(status="pending"))
        with pool.session() as s:
            n = actions.count(s, "jobkit", action)
            audit_id = actions.start(s, "jobkit", action, "test", n)
        actions.run(pool, "jobkit", audit_id, action, batch=7)  # 7 does not divide the count
    finally:
        pool.close()
    row = wait_finished(seeded, audit_id)
    assert n == pending and row["affected"] == n and counts(seeded).get("pending", 0) == 0


def test_cancel_and_delete_selected_jobs(open_client: TestClient, seeded: str) -> None:
    token = csrf(open_client)
    pending = seed_ids(seeded, "pending")[:3]
    wait_finished(seeded, act(open_client, token, verb="cancel", scope="ids", ids=pending))
    with Database(seeded).session() as s:
        assert {r["status"] for r in s.all("select status from jobkit.jobs where id = any(%s::uuid[])",
                                            (pending,))} == {"cancelled"}
    running = seed_ids(seeded, "processing")[:1]
    row = wait_finished(seeded, act(open_client, token, verb="delete", scope="ids", ids=pending + running))
    assert row["matched"] == 3 and row["affected"] == 3  # the running job is left alone
    with Database(seeded).session() as s:
        assert s.scalar("select count(*) from jobkit.jobs where id = any(%s::uuid[])", (pending,)) == 0
        assert s.scalar("select count(*) from jobkit.job_attempts where job_id = any(%s::uuid[])", (pending,)) == 0
        assert s.scalar("select status from jobkit.jobs where id = %s", (running[0],)) == "processing"


def test_retry_skips_a_job_whose_key_is_taken(open_client: TestClient, seeded: str) -> None:
    with Database(seeded).session() as s:
        life = Lifecycle(s)
        old = life.enqueue(NewJob("keyed", {}, idempotency_key="k1"))
        life.cancel(old)
        newer = life.enqueue(NewJob("keyed", {}, idempotency_key="k1"))
        other = life.enqueue(NewJob("keyed", {}, idempotency_key="k2"))
        life.cancel(other)
    row = wait_finished(seeded, act(open_client, csrf(open_client), verb="retry", scope="filter", type="keyed"))
    assert row["matched"] == 2 and row["affected"] == 1 and row["error"] is None
    with Database(seeded).session() as s:
        got = {r["id"]: r["status"] for r in s.all("select id, status from jobkit.jobs where type = 'keyed'")}
    assert got == {old: "cancelled", newer: "pending", other: "pending"}


def test_schedule_pause_and_resume_are_audited(open_client: TestClient, seeded: str) -> None:
    token = csrf(open_client, "/schedules")
    page = open_client.get("/schedules", headers=HTML).text
    name = re.search(r'name="name" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    assert open_client.post("/schedules/active", data={"csrf": token, "name": name, "active": "false"}).status_code == 303
    assert "paused" in open_client.get("/schedules", headers=HTML).text
    open_client.post("/schedules/active", data={"csrf": token, "name": name, "active": "true"})
    with Database(seeded).session() as s:
        rows = s.all("select action, target from jobkit.audit_log order by id")
    assert [r["action"] for r in rows] == ["pause_schedule", "resume_schedule"]
    assert rows[0]["target"] == {"schedule": name}


# ---- security ----------------------------------------------------------------------------------

def test_token_auth_and_csrf(token_client: TestClient, seeded: str) -> None:
    assert token_client.get("/jobs", headers=HTML).status_code == 303  # to the login page
    assert token_client.get("/jobs").status_code == 401
    assert token_client.post("/actions/run", data={"verb": "delete", "scope": "filter"}).status_code == 401
    assert token_client.post("/login", data={"credential": "wrong"}).status_code == 401
    signed_in = token_client.post("/login", data={"credential": TOKEN, "next": "/jobs"})
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/jobs"
    assert "httponly" in signed_in.headers["set-cookie"].lower()
    assert "samesite=strict" in signed_in.headers["set-cookie"].lower()
    before = fingerprint(seeded)
    form = {"verb": "delete", "scope": "filter", "matched": "1"}
    assert token_client.post("/actions/run", data=form).status_code == 403  # no CSRF token
    assert token_client.post("/actions/run", data={**form, "csrf": "forged"}).status_code == 403
    forged = {**form, "csrf": csrf(token_client), "matched": "all"}
    assert token_client.post("/actions/run", data=forged).status_code == 400  # not a count: refused
    assert token_client.post("/login", data={"credential": TOKEN, "next": "//evil.example/x"}
                             ).headers["location"] == "/"  # no open redirect
    assert fingerprint(seeded) == before
    bearer = {"authorization": f"Bearer {TOKEN}", **HTML}
    token_client.cookies.clear()
    assert token_client.get("/jobs", headers=bearer).status_code == 200


def test_supabase_jwt_with_the_configured_claim(seeded: str) -> None:
    def token(claims: dict[str, Any], secret: str = JWT_SECRET) -> str:
        return jwt.encode({"exp": int(time.time()) + 600, **claims}, secret, algorithm="HS256")

    for client in _client(seeded, auth=AuthConfig(jwt_secret=JWT_SECRET, jwt_claim="app_metadata.jobkit=admin")):
        ok = {"authorization": "Bearer " + token({"sub": "u1", "email": "ops@example.org",
                                                  "app_metadata": {"jobkit": "admin"}}), **HTML}
        assert client.get("/jobs", headers=ok).status_code == 200
        for bad in (token({"role": "service_role"}), token({"app_metadata": {"jobkit": "viewer"}}),
                    token({"app_metadata": {"jobkit": "admin"}}, secret="another-secret-entirely-different-0123456789"),
                    jwt.encode({"exp": int(time.time()) - 10, "app_metadata": {"jobkit": "admin"}},
                               JWT_SECRET, algorithm="HS256")):
            assert client.get("/jobs", headers={"authorization": f"Bearer {bad}"}).status_code == 401
        assert client.post("/login", data={"credential": token({"email": "ops@example.org",
                                                                "app_metadata": {"jobkit": "admin"}})}
                           ).status_code == 303
        wait_finished(seeded, act(client, csrf(client), verb="cancel", scope="ids",
                                  ids=seed_ids(seeded, "pending")[:1]))
        with Database(seeded).session() as s:
            assert s.scalar("select actor from jobkit.audit_log") .startswith("jwt:ops@example.org@")


def test_refuses_to_start_exposed_without_auth(seeded: str) -> None:
    with pytest.raises(ConfigError, match="without authentication"):
        check(DashboardOptions(host="0.0.0.0"))
    check(DashboardOptions(host="0.0.0.0", token=TOKEN))
    check(DashboardOptions(host="::1"))
    with pytest.raises(ConfigError, match="shorter than 16"):
        check(DashboardOptions(host="0.0.0.0", token="short"))
    with pytest.raises(ConfigError, match="shorter than 32"):
        check(DashboardOptions(host="0.0.0.0", jwt_secret="short"))
    with pytest.raises(ConfigError, match="PATH=VALUE"):
        check(DashboardOptions(host="0.0.0.0", jwt_secret=JWT_SECRET, jwt_claim="role"))
    result = CliRunner().invoke(cli, ["dashboard", "--host", "0.0.0.0", "--db-url", seeded])
    assert result.exit_code != 0 and "refusing to serve the dashboard on 0.0.0.0" in result.output


def test_without_auth_only_loopback_host_names(seeded: str) -> None:
    for client in _client(seeded, base="http://rebound.example.com"):
        assert client.get("/jobs", headers=HTML).status_code == 421


def test_read_only_mode(seeded: str) -> None:
    for client in _client(seeded, read_only=True):
        page = client.get("/jobs", headers=HTML).text
        assert "/actions/confirm" not in page and "Pause" not in client.get("/schedules", headers=HTML).text
        before = fingerprint(seeded)
        token = csrf(client)
        assert client.post("/actions/run", data={"csrf": token, "verb": "delete", "scope": "filter"}
                           ).status_code == 403
        assert fingerprint(seeded) == before


def test_no_secret_in_any_page(open_client: TestClient, seeded: str) -> None:
    from jobkit.worker.secrets import set_secrets

    secret = "whsec-do-not-show-this-anywhere-0123456789"
    set_secrets(Database(seeded), Settings(db_url=seeded), url="http://worker.internal/run", secret=secret)
    for path in PAGES:
        assert secret not in open_client.get(path, headers=HTML).text


def test_mounted_inside_another_app(seeded: str) -> None:
    dashboard = Dashboard(seeded, Settings(db_url=seeded), auth=AuthConfig(token=TOKEN))
    outer = Starlette(routes=[Mount("/ops/jobs", app=dashboard.app)])
    with TestClient(outer, base_url="http://127.0.0.1", follow_redirects=False) as client:
        assert client.get("/ops/jobs/jobs?type=x", headers=HTML).headers["location"] == \
            "/ops/jobs/login?next=/jobs%3Ftype%3Dx"
        signed_in = client.post("/ops/jobs/login", data={"credential": TOKEN, "next": "/jobs"})
        assert signed_in.headers["location"] == "/ops/jobs/jobs"
        page = client.get("/ops/jobs/jobs", headers=HTML).text
        assert 'href="/ops/jobs/static/htmx.min.js"' not in page  # scripts are src=, links below
        assert 'src="/ops/jobs/static/htmx.min.js"' in page and 'href="/ops/jobs/schedules"' in page
        assert client.get("/ops/jobs/static/dashboard.js").status_code == 200
    dashboard.close()


def test_late_schedules_are_flagged() -> None:
    from datetime import UTC, datetime

    from jobkit.cron.schedules import ScheduleRow
    from jobkit.dashboard.data import _late

    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)

    def row(schedule: str, last: timedelta | None, active: bool = True) -> ScheduleRow:
        return ScheduleRow("s", schedule, "t", active, "config", None if last is None else now - last, None, None)

    assert not _late(row("* * * * *", timedelta(seconds=50)), now)
    assert _late(row("* * * * *", timedelta(minutes=10)), now)
    assert not _late(row("* * * * *", timedelta(minutes=10), active=False), now)
    assert not _late(row("0 3 * * *", timedelta(hours=9)), now)  # ran at 03:00 today
    assert _late(row("0 3 * * *", timedelta(hours=20)), now)  # ran yesterday afternoon, missed 03:00
    assert _late(row("0 3 * * *", timedelta(days=2)), now)
    assert _late(row("30 seconds", timedelta(minutes=5)), now)
    assert not _late(row("30 seconds", timedelta(seconds=20)), now)
    assert not _late(row("* * * * *", None), now)  # never ran: not called late (no creation time)


def test_mounted_in_the_worker_app(seeded: str) -> None:
    """README's recipe: the worker's ASGI app serves /run and the dashboard side by side."""
    from jobkit.dashboard import create_dashboard
    from jobkit.handlers import Registry
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.endpoint import create_app

    app = create_app(Registry(), PostgresBackend(seeded), secret="s" * 32)
    dashboard = create_dashboard(seeded, Settings(db_url=seeded), auth=AuthConfig(token=TOKEN))
    app.router.routes.append(Mount("/jobkit", app=dashboard.app))
    with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as client:
        assert client.get("/healthz").status_code == 200
        page = client.get("/jobkit/jobs", headers={"authorization": f"Bearer {TOKEN}", **HTML})
        assert page.status_code == 200 and 'href="/jobkit/schedules"' in page.text
        assert client.get("/jobkit/jobs").status_code == 401
    dashboard.close()


def test_cli_refuses_a_database_without_jobkit_or_unreachable(fresh_db: str) -> None:
    result = CliRunner().invoke(cli, ["dashboard", "--db-url", fresh_db])
    assert result.exit_code == 1 and "not deployed" in result.output and "jobkit deploy" in result.output
    result = CliRunner().invoke(cli, ["dashboard", "--db-url", "postgresql://postgres@127.0.0.1:1/x"])
    assert result.exit_code == 1 and "cannot connect" in result.output


def test_payload_index_follows_the_config(db_url: str) -> None:
    def index(url: str) -> Any:
        with Database(url).session() as s:
            return s.scalar("select indisvalid from pg_index where indexrelid = "
                            "to_regclass('jobkit.jobs_payload_idx')")

    quiet = {"echo": lambda _m: None}
    assert index(db_url) is None  # not by default: it costs every enqueue and state change
    on = Settings(db_url=db_url, payload_index=True)
    with pytest.raises(DriftError):
        deploy(Database(db_url), on, DeployOptions(check=True, schedules=False), **quiet)
    report = deploy(Database(db_url), on, DeployOptions(schedules=False), **quiet)
    assert "payload index built" in report.settings_changed and index(db_url) is True
    assert "payload index built" not in deploy(Database(db_url), on, DeployOptions(schedules=False),
                                               **quiet).settings_changed
    with Database(db_url).session() as s:  # a failed CONCURRENTLY build leaves an invalid index
        s.execute("update pg_index set indisvalid = false where indexrelid = 'jobkit.jobs_payload_idx'::regclass")
    deploy(Database(db_url), on, DeployOptions(schedules=False), **quiet)
    assert index(db_url) is True
    report = deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(schedules=False), **quiet)
    assert "payload index dropped" in report.settings_changed and index(db_url) is None


def test_created_index_is_opt_in_and_follows_the_config(db_url: str) -> None:
    """Issue 23: the jobs page's keyset index cost every insert; deploy builds it only when asked."""
    def index(url: str) -> Any:
        with Database(url).session() as s:
            return s.scalar("select indisvalid from pg_index where indexrelid = "
                            "to_regclass('jobkit.jobs_created_page_idx')")

    quiet = {"echo": lambda _m: None}
    assert index(db_url) is None  # not built by default
    on = Settings(db_url=db_url, created_index=True)
    report = deploy(Database(db_url), on, DeployOptions(schedules=False), **quiet)
    assert "created index built" in report.settings_changed and index(db_url) is True
    assert "created index built" not in deploy(Database(db_url), on, DeployOptions(schedules=False),
                                               **quiet).settings_changed
    report = deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(schedules=False), **quiet)
    assert "created index dropped" in report.settings_changed and index(db_url) is None
    with Database(db_url).session() as s:  # 0003's index is gone for good
        assert s.scalar("select to_regclass('jobkit.jobs_created_idx')") is None


def test_jobs_page_says_when_payload_search_is_unindexed(open_client: TestClient, seeded: str) -> None:
    page = open_client.get("/jobs", params={"payload": '{"user_id": 1}'}, headers=HTML).text
    assert 'id="unindexed"' in page
    deploy(Database(seeded), Settings(db_url=seeded, payload_index=True), DeployOptions(), echo=lambda _m: None)
    assert 'id="unindexed"' not in open_client.get("/jobs", params={"payload": '{"user_id": 1}'},
                                                   headers=HTML).text
    assert 'id="unindexed"' not in open_client.get("/jobs", headers=HTML).text


def test_pause_and_resume_a_type_from_the_overview(open_client: TestClient, seeded: str) -> None:
    token = csrf(open_client, "/")
    assert 'id="toggle-send_email">Pause' in open_client.get("/", headers=HTML).text
    form = {"csrf": token, "type": "send_email", "active": "false"}
    assert open_client.post("/types/active", data=form).status_code == 303
    with Database(seeded).session() as s:
        assert s.all("select type, key from jobkit.pauses") == [{"type": "send_email", "key": None}]
    page = open_client.get("/", headers=HTML).text
    assert 'id="toggle-send_email">Resume' in page and "paused" in page
    open_client.post("/types/active", data={**form, "active": "true"})
    with Database(seeded).session() as s:
        assert s.scalar("select count(*) from jobkit.pauses") == 0
        rows = s.all("select action, target, affected from jobkit.audit_log order by id")
    assert [(r["action"], r["target"], r["affected"]) for r in rows] == [
        ("pause_type", {"type": "send_email", "key": None}, 1),
        ("resume_type", {"type": "send_email", "key": None}, 1)]
    assert open_client.post("/types/active", data={**form, "type": "not a type!"}).status_code == 400


# ---- issue 21: hostile input, CSRF and Origin, refusals in the log, a busy port ------------------

def _quiet_client(url: str, **options: Any) -> Iterator[TestClient]:
    """A client that turns a server error into a 500 response (not an exception in the test)."""
    dashboard = Dashboard(url, Settings(db_url=url), **options)
    with TestClient(dashboard.app, base_url="http://127.0.0.1", follow_redirects=False,
                    raise_server_exceptions=False) as client:
        yield client
    dashboard.close()


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage()[:200] for r in bad]


def test_hostile_filters_and_counts_are_4xx_without_a_traceback(seeded: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Found 5: a payload filter of 100,000 `[`, matched=² and a matched of 5,000 digits were 500s."""
    caplog.set_level(logging.WARNING)
    before = fingerprint(seeded)
    for client in _quiet_client(seeded):
        form = {"csrf": csrf(client), "verb": "delete", "scope": "filter"}
        deep = client.post("/actions/confirm", data={**form, "payload": "[" * 100_000})  # 300 KB encoded
        assert deep.status_code == 413 and "larger than" in deep.text, deep.text[:300]
        deep = client.post("/actions/confirm", files={"payload": (None, "[" * 100_000)}, data=form)
        assert deep.status_code == 400 and "payload filter" in deep.text, deep.text[:300]
        deep = client.get("/jobs", params={"payload": "[" * 20_000}, headers=HTML)  # httpx's URL limit
        assert deep.status_code == 400 and "payload filter" in deep.text, deep.text[:300]
        nested = client.get("/jobs", params={"payload": "[" * 5_000 + "]" * 5_000}, headers=HTML)
        assert nested.status_code == 400 and "nested too deeply" in nested.text
        huge = client.get("/jobs", params={"payload": '{"a": ' + "1" * 5_000 + "}"}, headers=HTML)
        assert huge.status_code == 400 and "not JSON" in huge.text
        for matched in ("²", "9" * 5_000, "١٢", "-1", "1e3"):
            run = client.post("/actions/run", data={**form, "matched": matched})
            assert run.status_code == 400 and "matched must be the count" in run.text, (matched, run.text[:300])
        assert client.get("/actions/" + "9" * 5_000, headers=HTML).status_code == 404
        assert client.get(f"/actions/{'9' * 5_000}/progress", headers=HTML).status_code == 404
    assert fingerprint(seeded) == before
    _no_traceback(caplog)


def test_csrf_comes_only_from_the_form_or_a_header(open_client: TestClient, seeded: str) -> None:
    """Found 7: a token in the query string was accepted; it ends up in logs, history and Referer."""
    token = csrf(open_client)
    before = fingerprint(seeded)
    form = {"verb": "delete", "scope": "filter", "type": "send_email", "status": "dead"}
    in_query = open_client.post(f"/actions/confirm?csrf={token}", data=form)
    assert in_query.status_code == 403 and "CSRF" in in_query.text
    assert open_client.post(f"/types/active?csrf={token}", data={"type": "send_email", "active": "false"}
                            ).status_code == 403
    assert fingerprint(seeded) == before
    by_header = open_client.post("/actions/confirm", data=form, headers={"x-csrf-token": token})
    assert by_header.status_code == 200 and 'name="matched" value="20"' in by_header.text
    assert open_client.post("/actions/confirm", data=form, headers={"x-csrf-token": "forged"}).status_code == 403


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:9999", "null",
                                    "http://127.0.0.1.evil.example", "not a url"])
def test_a_post_from_another_origin_is_403(open_client: TestClient, seeded: str, origin: str) -> None:
    """Found 7: Origin was not checked; it is now whenever a browser sends it."""
    token = csrf(open_client)
    before = fingerprint(seeded)
    form = {"csrf": token, "type": "send_email", "active": "false"}
    refused = open_client.post("/types/active", data=form, headers={"origin": origin})
    assert refused.status_code == 403 and "Origin" in refused.text
    assert fingerprint(seeded) == before
    assert open_client.post("/types/active", data=form, headers={"origin": "http://127.0.0.1"}).status_code == 303
    assert open_client.post("/types/active", data={**form, "active": "true"}).status_code == 303  # no Origin


def test_origin_behind_a_proxy_and_on_the_login_form(token_client: TestClient) -> None:
    login = {"credential": TOKEN, "next": "/jobs"}
    assert token_client.post("/login", data=login, headers={"origin": "https://evil.example"}).status_code == 403
    proxied = {"origin": "https://ops.example.org", "x-forwarded-host": "ops.example.org"}
    assert token_client.post("/login", data=login, headers=proxied).status_code == 303
    assert token_client.post("/login", data=login, headers={"origin": "http://127.0.0.1:80"}).status_code == 303


def test_refused_requests_write_few_log_lines(open_client: TestClient, token_client: TestClient,
                                              caplog: pytest.LogCaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Found 7: every refusal wrote a WARNING. Refusals are logged, at most a burst per interval."""
    from jobkit.logthrottle import BURST, Throttle

    logger = logging.getLogger("jobkit.dashboard.refused")
    assert any(isinstance(f, Throttle) for f in logger.filters)
    monkeypatch.setattr(logger, "filters", [Throttle()])  # not what earlier tests used up
    caplog.set_level(logging.WARNING, logger="jobkit")
    for _ in range(200):
        open_client.post("/actions/run", data={"csrf": "forged", "verb": "delete", "scope": "filter"})
        token_client.post("/login", data={"credential": "wrong"})
        token_client.get("/jobs", headers={"authorization": "Bearer wrong"})
    refusals = [r.getMessage() for r in caplog.records if r.name == "jobkit.dashboard.refused"]
    assert any("CSRF" in m for m in refusals) and any("wrong credential" in m for m in refusals)
    assert 3 <= len(refusals) <= 3 * BURST, len(refusals)


def test_a_form_without_length_or_too_large_is_refused(open_client: TestClient, seeded: str) -> None:
    from jobkit.dashboard.app import MAX_FORM

    token = csrf(open_client)
    big = open_client.post("/actions/confirm", data={"csrf": token, "verb": "delete", "x": "a" * MAX_FORM})
    assert big.status_code == 413

    def chunks() -> Iterator[bytes]:
        yield f"csrf={token}&verb=delete&scope=filter".encode()

    assert open_client.post("/actions/confirm", content=chunks(),
                            headers={"content-type": "application/x-www-form-urlencoded"}).status_code == 411


def test_dashboard_on_a_busy_port_is_one_line_and_exit_1(seeded: str) -> None:
    """Found 16: it printed its URL, then failed to bind and exited 3."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(cli, ["dashboard", "--port", str(port), "--db-url", seeded])
    assert result.exit_code == 1, result.output
    assert f"port {port} on 127.0.0.1 is already in use" in result.output and "hint:" in result.output
    assert "jobkit dashboard on" not in result.output and "Traceback" not in result.output
