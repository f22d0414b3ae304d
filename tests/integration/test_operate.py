"""The one operator API (toolkit/ops/operate.py) behind `jobkit jobs retry|cancel|delete`,
`jobkit pause|resume` and the dashboard's actions, against a real database: the CLI and the
dashboard make the same changes and the same audit rows for the same selection; actions run in
batches, one transaction each, and a failure mid-way leaves the committed batches committed and
says how far it got; bad input is a one-line error that changes nothing."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner, Result
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.dashboard import Dashboard
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops import operate
from jobkit.ops.selection import JobFilter
from jobkit.schema.deploy import DeployOptions, deploy
from starlette.testclient import TestClient

HTML = {"accept": "text/html"}
AUDIT = "select actor, action, target, matched, affected, skipped, error, finished_at is not null as finished " \
        "from jobkit.audit_log order by id"


def _jobkit(url: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, [*args, "--db-url", url], input=input)


def _fill(url: str) -> None:
    """The same jobs in any database: of type mail 4 dead, 2 failed, 2 pending and a dead one whose
    idempotency key a newer pending job holds; of type other 2 dead. Told apart by payload n."""
    with Database(url).session() as s:
        life = Lifecycle(s)
        for n in range(8):
            life.enqueue(NewJob("mail", {"n": n}))
        life.enqueue(NewJob("mail", {"n": 8}, idempotency_key="k"))
        life.enqueue(NewJob("other", {"n": 9}))
        life.enqueue(NewJob("other", {"n": 10}))
        s.execute("update jobkit.jobs set status = 'dead', completed_at = now() "
                  "where (payload->>'n')::int in (0, 1, 2, 3, 8, 9, 10)")
        s.execute("update jobkit.jobs set status = 'failed', completed_at = now() "
                  "where (payload->>'n')::int in (4, 5)")
        life.enqueue(NewJob("mail", {"n": 11}, idempotency_key="k"))  # the key is free again


def _states(url: str) -> dict[int, str]:
    with Database(url).session() as s:
        return {int(r["n"]): r["status"] for r in s.all("select payload->>'n' as n, status from jobkit.jobs")}


def _audit(url: str) -> list[dict[str, Any]]:
    with Database(url).session() as s:
        return s.all(AUDIT)


@pytest.fixture
def twin(other_fresh_db: str) -> str:
    """A second deployed database, for the dashboard's side of a comparison."""
    deploy(Database(other_fresh_db), Settings(db_url=other_fresh_db), DeployOptions(schedules=False),
           echo=lambda _m: None)
    return other_fresh_db


@pytest.fixture
def dashboard(twin: str) -> Iterator[TestClient]:
    board = Dashboard(twin, Settings(db_url=twin))
    with TestClient(board.app, base_url="http://127.0.0.1", follow_redirects=False) as client:
        yield client
    board.close()


def _dashboard_action(client: TestClient, url: str, **form: Any) -> int:
    page = client.get("/jobs", headers=HTML)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert token
    confirm = client.post("/actions/confirm", data={"csrf": token.group(1), **form})
    matched = re.search(r'name="matched" value="(\d+)"', confirm.text)
    assert matched, confirm.text
    run = client.post("/actions/run", data={"csrf": token.group(1), "matched": matched.group(1), **form})
    assert run.status_code == 303
    audit_id = int(run.headers["location"].rsplit("/", 1)[1])
    deadline = time.monotonic() + 30
    while True:
        with Database(url).session() as s:
            row = s.one("select finished_at from jobkit.audit_log where id = %s", (audit_id,))
        if row and row["finished_at"] is not None:
            return audit_id
        assert time.monotonic() < deadline, f"action {audit_id} did not finish"
        time.sleep(0.05)


def _by_payload(url: str) -> list[dict[str, Any]]:
    """The audit rows without the actor, job ids told as their payload's n (ids differ by database)."""
    names = {str(i): n for n, i in _ids(url).items()}
    rows = _without_actor(_audit(url))
    for row in rows:
        if "ids" in row["target"]:
            row["target"] = {"ids": [names.get(i, "gone") for i in row["target"]["ids"]]}
    return rows


def _without_actor(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "actor"} for r in rows]


# ---- the CLI and the dashboard: one API -----------------------------------------------------------

def test_cli_and_dashboard_make_the_same_changes_and_audit_rows(db_url: str, twin: str,
                                                                  dashboard: TestClient) -> None:
    _fill(db_url)
    _fill(twin)
    cli_run = _jobkit(db_url, "jobs", "retry", "--type", "mail", "--as", "alice", "--yes")
    audit_id = _dashboard_action(dashboard, twin, verb="retry", scope="filter", type="mail")
    assert cli_run.exit_code == 1  # one job was left alone, and the CLI says so
    assert "retrying 6 job(s)" in cli_run.output
    assert f"skipped 1: 1 {operate.KEY_HELD}" in cli_run.output
    assert _states(db_url) == _states(twin) == {
        0: "pending", 1: "pending", 2: "pending", 3: "pending", 4: "pending", 5: "pending", 6: "pending",
        7: "pending", 8: "dead", 9: "dead", 10: "dead", 11: "pending"}
    by_cli, by_dashboard = _audit(db_url), _audit(twin)
    assert _without_actor(by_cli) == _without_actor(by_dashboard) == [{
        "action": "retry", "target": {"filter": {"type": "mail"}}, "matched": 7, "affected": 6,
        "skipped": {operate.KEY_HELD: 1}, "error": None, "finished": True}]
    assert by_cli[0]["actor"] == "alice@cli" and by_dashboard[0]["actor"].startswith("local@")
    shown = dashboard.get(f"/actions/{audit_id}/progress", headers=HTML).text
    assert f"left alone: 1 {operate.KEY_HELD}" in shown
    assert f"1 {operate.KEY_HELD}" in dashboard.get("/actions", headers=HTML).text


def test_cli_and_dashboard_cancel_and_delete_by_ids_alike(db_url: str, twin: str,
                                                           dashboard: TestClient) -> None:
    _fill(db_url)
    _fill(twin)
    for url, act in ((db_url, "cli"), (twin, "dashboard")):
        with Database(url).session() as s:
            ids = {int(r["n"]): str(r["id"]) for r in s.all("select payload->>'n' as n, id from jobkit.jobs")}
        pick = [ids[6], ids[7], ids[0]]  # two pending, one dead: cancel skips the dead one
        if act == "cli":
            assert _jobkit(url, "jobs", "cancel", *pick, "--as", "bob").exit_code == 1
            assert _jobkit(url, "jobs", "delete", ids[6], ids[9], "--yes").exit_code == 0
        else:
            _dashboard_action(dashboard, url, verb="cancel", scope="ids", ids=pick)
            _dashboard_action(dashboard, url, verb="delete", scope="ids", ids=[ids[6], ids[9]])
    assert _states(db_url) == _states(twin)
    assert 6 not in _states(db_url) and _states(db_url)[7] == "cancelled" and _states(db_url)[0] == "dead"
    rows = _by_payload(db_url)
    assert rows == _by_payload(twin)
    assert [(r["action"], r["matched"], r["affected"], r["skipped"]) for r in rows] == [
        ("cancel", 2, 2, {"is dead: only pending or processing jobs cancel": 1}),
        ("delete", 2, 2, {})]
    assert [r["target"] for r in rows] == [{"ids": ["gone", 7, 0]}, {"ids": ["gone", "gone"]}]


def test_the_clis_bulk_retry_is_audited_in_batches(db_url: str) -> None:
    """The Found item with the options the CLI had before: `jobs retry --dead` retried one id at a
    time and wrote no audit row; now one row per action, its counts and its filter."""
    _fill(db_url)
    result = _jobkit(db_url, "jobs", "retry", "--dead", "--yes")
    assert result.exit_code == 1 and "retrying 6 job(s)" in result.output
    rows = _audit(db_url)
    assert len(rows) == 1 and rows[0]["actor"].endswith("@cli")
    assert _without_actor(rows) == [{
        "action": "retry", "target": {"filter": {"status": "dead"}}, "matched": 7, "affected": 6,
        "skipped": {operate.KEY_HELD: 1}, "error": None, "finished": True}]


def test_pause_from_the_cli_is_audited_as_from_the_dashboard(db_url: str, twin: str,
                                                            dashboard: TestClient) -> None:
    for url in (db_url, twin):
        with Database(url).session() as s:
            Lifecycle(s).enqueue(NewJob("mail", {}))
    assert _jobkit(db_url, "pause", "mail", "--as", "carol").exit_code == 0
    assert _jobkit(db_url, "resume", "mail", "--as", "carol").exit_code == 0
    token = re.search(r'name="csrf-token" content="([^"]+)"', dashboard.get("/", headers=HTML).text)
    assert token
    for active in ("false", "true"):
        form = {"csrf": token.group(1), "type": "mail", "active": active}
        assert dashboard.post("/types/active", data=form).status_code == 303
    assert _without_actor(_audit(db_url)) == _without_actor(_audit(twin))
    assert [(r["actor"], r["action"], r["affected"]) for r in _audit(db_url)] == [
        ("carol@cli", "pause_type", 1), ("carol@cli", "resume_type", 1)]


# ---- batches ---------------------------------------------------------------------------------------

def test_an_action_runs_in_batches_one_transaction_each(db_url: str) -> None:
    _fill(db_url)
    seen: list[tuple[int, int]] = []
    op = operate.Operation("retry", filter=JobFilter(status="dead"))
    result = operate.perform(Database(db_url), "jobkit", op, "test", batch=2,
                             progress=lambda r: seen.append((r.batches, r.done)))
    assert result.batches == 4 and seen == [(1, 2), (2, 4), (3, 5), (4, 6)]  # 7 dead: 0 1|2 3|8 9|10
    assert result.done == 6 and dict(result.skipped) == {operate.KEY_HELD: 1} and result.error is None
    assert len(result.skipped_ids) == 1
    assert _audit(db_url)[0] | {"actor": None} == {
        "actor": None, "action": "retry", "target": {"filter": {"status": "dead"}}, "matched": 7,
        "affected": 6, "skipped": {operate.KEY_HELD: 1}, "error": None, "finished": True}


def test_cli_batches_by_filter(db_url: str) -> None:
    _fill(db_url)
    result = _jobkit(db_url, "jobs", "cancel", "--status", "pending", "--batch", "1", "--yes")
    assert result.exit_code == 0, result.output
    assert "cancelled 3 job(s)" in result.output
    assert sorted(n for n, st in _states(db_url).items() if st == "cancelled") == [6, 7, 11]


def _fail_on(session: Session, n: int) -> None:
    """A trigger the test plants: updating the job of payload n raises."""
    session.execute(
        "create function public.refuse() returns trigger language plpgsql as $$ begin "
        f"if new.payload->>'n' = '{n}' then raise exception 'planted failure on job {n}'; end if; "
        "return new; end $$")
    session.execute("create trigger refuse before update on jobkit.jobs for each row "
                    "execute function public.refuse()")


def test_a_failure_mid_way_keeps_the_committed_batches_and_says_so(db_url: str, session: Session) -> None:
    _fill(db_url)
    _fail_on(session, 2)  # the dead jobs go oldest first: 0 1 | 2 3 | 8 ...: the second batch fails
    result = _jobkit(db_url, "jobs", "retry", "--dead", "--type", "mail", "--batch", "2", "--yes")
    assert result.exit_code == 1
    assert "retrying 2 job(s)" in result.output
    assert "error: stopped after 1 batch(es), 2 job(s) retried: planted failure on job 2" in result.output
    states = _states(db_url)
    assert (states[0], states[1]) == ("pending", "pending")  # the first batch stays committed
    assert (states[2], states[3], states[8]) == ("dead", "dead", "dead")  # the second rolled back whole
    row = _audit(db_url)[0]
    assert row["affected"] == 2 and row["finished"] and "planted failure on job 2" in row["error"]


# ---- what was left alone, and why ------------------------------------------------------------------

def test_ids_left_alone_are_counted_by_reason(db_url: str, manager: Lifecycle) -> None:
    _fill(db_url)
    ids = {n: str(i) for n, i in _ids(db_url).items()}
    missing = str(uuid4())
    result = _jobkit(db_url, "jobs", "retry", ids[0], ids[6], ids[8], missing)
    assert result.exit_code == 1
    assert "retrying 1 job(s)" in result.output
    assert f"not retried: {missing}: not found" in result.output
    assert f"not retried: {ids[6]}: is pending: only failed, dead or cancelled jobs retry" in result.output
    assert f"not retried: {ids[8]}: {operate.KEY_HELD}" in result.output
    assert "error: 3 job(s) could not be retried (listed above)" in result.output
    assert _audit(db_url)[0]["skipped"] == {
        "not found": 1, "is pending: only failed, dead or cancelled jobs retry": 1, operate.KEY_HELD: 1}


def test_one_id_keeps_its_one_line_error(db_url: str) -> None:
    _fill(db_url)
    ids = _ids(db_url)
    held = _jobkit(db_url, "jobs", "retry", str(ids[8]))
    assert held.exit_code == 1, held.output
    assert held.output.splitlines()[0] == f"error: job {ids[8]}: {operate.KEY_HELD}"
    assert _jobkit(db_url, "jobs", "delete", str(ids[0]), "--yes").exit_code == 0
    gone = _jobkit(db_url, "jobs", "delete", str(ids[0]), "--yes")
    assert gone.exit_code == 1 and gone.output.splitlines()[0] == f"error: no job {ids[0]}"


def _ids(url: str) -> dict[int, UUID]:
    with Database(url).session() as s:
        return {int(r["n"]): r["id"] for r in s.all("select payload->>'n' as n, id from jobkit.jobs")}


# ---- bad input: one line, nothing changed ------------------------------------------------------------

@pytest.mark.parametrize(("args", "error"), [
    (("jobs", "retry"), "error: no job ids and no filter: that would retry every job"),
    (("jobs", "delete", "--yes"), "error: no job ids and no filter: that would delete every job"),
    (("jobs", "cancel", "--status", "nope"), "error: unknown status 'nope'"),
    (("jobs", "retry", "--payload", "[1]"), "error: payload filter must be a JSON object"),
    (("jobs", "retry", "--since", "yesterday"), "error: since: 'yesterday' is not a time"),
    (("jobs", "retry", "not-a-uuid"), "error: 'not-a-uuid' is not a job id"),
    (("jobs", "retry", str(UUID(int=1)), "--type", "mail"), "error: job ids and a filter given"),
    (("jobs", "retry", "--dead", "--status", "failed"), "Error: --dead is --status dead"),
    (("jobs", "retry", "--type", "mail", "--as", "x" * 1100, "--yes"), "error: who acts must be 1 to 1000"),
    (("jobs", "retry", "--type", "mail", "--as", "a\x00b", "--yes"), "error: who acts must be 1 to 1000"),
    (("jobs", "retry", "--type", "mail", "--as", " ", "--yes"), None),  # blank --as: the OS user
])
def test_bad_input_is_one_line_and_changes_nothing(db_url: str, args: tuple[str, ...],
                                                   error: str | None) -> None:
    _fill(db_url)
    before = _states(db_url)
    result = _jobkit(db_url, *args)
    if error is None:
        assert _audit(db_url)[0]["actor"].endswith("@cli") and _audit(db_url)[0]["actor"] != "@cli"
        return
    assert result.exit_code in (1, 2)
    assert error in result.output, result.output
    assert _states(db_url) == before and _audit(db_url) == []
    if result.exit_code == 1:
        assert result.output.splitlines()[0].startswith("error: ") and len(result.output.splitlines()) <= 2


def test_all_means_every_job(db_url: str) -> None:
    _fill(db_url)
    refused = _jobkit(db_url, "jobs", "cancel", "--yes")
    assert refused.exit_code == 1 and "--all to mean every job" in refused.output
    done = _jobkit(db_url, "jobs", "cancel", "--all", "--yes")
    assert done.exit_code == 0 and "cancelled 3 job(s)" in done.output
    assert _audit(db_url)[0]["target"] == {"filter": {}}


def test_a_filter_matching_nothing_changes_nothing(db_url: str) -> None:
    _fill(db_url)
    result = _jobkit(db_url, "jobs", "retry", "--type", "nothing_like_it", "--yes")
    assert result.exit_code == 0 and "nothing to retry" in result.output and _audit(db_url) == []


def test_the_confirmation_can_be_declined(db_url: str) -> None:
    _fill(db_url)
    before = _states(db_url)
    result = _jobkit(db_url, "jobs", "delete", "--type", "other", input="n\n")
    assert result.exit_code == 1 and "delete 2 job(s) (every job where type is other)?" in result.output
    assert "the jobs:" in result.output and result.output.count("  other  dead") == 2  # the sample first
    assert _states(db_url) == before and _audit(db_url) == []


def test_key_filter_selects_by_concurrency_key(db_url: str, manager: Lifecycle) -> None:
    a = manager.enqueue(NewJob("report", {"n": 1}, concurrency_key="tenant:1"))
    b = manager.enqueue(NewJob("report", {"n": 2}, concurrency_key="tenant:2"))
    result = _jobkit(db_url, "jobs", "cancel", "--key", "tenant:1", "--yes")
    assert result.exit_code == 0 and "cancelled 1 job(s)" in result.output
    assert manager.get(a).status == "cancelled" and manager.get(b).status == "pending"  # type: ignore[union-attr]
