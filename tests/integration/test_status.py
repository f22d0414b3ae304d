"""`jobkit status` and `jobkit jobs` against the real database."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from uuid import UUID

from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops import status as status_api


def _fill(manager: Lifecycle, session: Session) -> None:
    manager.enqueue_many([NewJob("mail", {"i": i}) for i in range(5)])
    manager.enqueue(NewJob("mail", {}, delay=timedelta(hours=1)))
    done = manager.claim("mail", 2, "w", timedelta(minutes=5))
    manager.complete([(done[0].id, 1, '{"ok": true}')])
    manager.fail([Failure(done[1].id, 1, "boom", permanent=True)])
    manager.sweep_dead()
    manager.claim("mail", 1, "w", timedelta(minutes=5))


def test_status_counts(db_url: str, manager: Lifecycle, session: Session) -> None:
    _fill(manager, session)
    st = status_api.collect(Database(db_url), Settings(db_url=db_url))
    [mail] = st.types
    assert (mail.runnable, mail.scheduled, mail.processing, mail.completed_1h, mail.failed_attempts_1h, mail.dead_jobs_1h) == (
        2, 1, 1, 1, 1, 1)
    assert mail.oldest_runnable_s is not None and mail.oldest_runnable_s >= 0
    assert st.wakeups == {}  # NOTIFY wake-ups have no answer to track
    result = CliRunner().invoke(cli, ["status", "--json", "--db-url", db_url])
    assert result.exit_code == 0 and json.loads(result.output)["types"][0]["runnable"] == 2
    table = CliRunner().invoke(cli, ["status", "--db-url", db_url])
    assert table.exit_code == 0 and "mail" in table.output and "\x1b[" not in table.output


def test_status_json_says_failed_attempts_and_dead_jobs(db_url: str, manager: Lifecycle, session: Session) -> None:
    """One vocabulary (issue 26): attempts that failed and jobs that are dead, by name, in JSON too."""
    _fill(manager, session)
    status = json.loads(CliRunner().invoke(cli, ["status", "--json", "--db-url", db_url]).output)
    mail = {t["type"]: t for t in status["types"]}["mail"]
    assert {"failed_attempts_1h", "dead_jobs_1h"} <= set(mail) and not {"failed_1h", "dead_1h"} & set(mail)


def test_jobs_list_show_cancel_retry_purge(db_url: str, manager: Lifecycle, session: Session) -> None:
    _fill(manager, session)
    runner = CliRunner()
    base = ["--db-url", db_url]
    listed = json.loads(runner.invoke(cli, ["jobs", "list", "--status", "dead", "--json", *base]).output)
    assert len(listed) == 1 and listed[0]["error"] == "boom"
    dead_id = listed[0]["id"]
    shown = runner.invoke(cli, ["jobs", "show", dead_id, *base])
    assert shown.exit_code == 0 and "attempt 1 on w: failed" in shown.output and "boom" in shown.output
    # issue 26: an attempt's duration prints as 2m30s / 12ms, never as a Python timedelta (0:00:00.012)
    assert re.search(r"attempt 1 on w: failed at \S+ \(((\d+(d|h|m|s|ms))+|-)\)", shown.output), shown.output
    assert not re.search(r"\(\d+:\d\d:\d\d", shown.output)
    # --json: times as every command prints them (ISO 8601 UTC), durations as seconds, never "0:00:00.012"
    as_json = json.loads(runner.invoke(cli, ["jobs", "show", dead_id, "--json", *base]).output)
    [attempt] = as_json["attempts"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", as_json["job"]["created_at"])
    assert "duration" in attempt and isinstance(attempt["duration"], (int, float, type(None)))
    assert not re.search(r'"\d+:\d\d:\d\d', json.dumps(as_json))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", listed[0]["created_at"])
    assert runner.invoke(cli, ["jobs", "retry", "--dead", "--type", "mail", "--yes", *base]).output.strip() == \
        "retrying 1 job(s)"
    assert manager.get(_uuid(dead_id)).status == "pending"  # type: ignore[union-attr]
    pending = json.loads(runner.invoke(cli, ["jobs", "list", "--status", "pending", "--json", *base]).output)
    assert runner.invoke(cli, ["jobs", "cancel", pending[0]["id"], *base]).exit_code == 0
    again = runner.invoke(cli, ["jobs", "cancel", pending[0]["id"], *base])
    assert again.exit_code == 1 and "only pending or processing jobs cancel" in again.output
    session.execute("update jobkit.jobs set completed_at = now() - interval '10 days' where status = 'completed'")
    purged = runner.invoke(cli, ["jobs", "purge", "--status", "completed", "--older-than", "7d", "--yes", *base])
    assert purged.exit_code == 0 and "deleted 1 job(s)" in purged.output
    assert session.scalar("select count(*) from jobkit.jobs where status = 'completed'") == 0


def test_jobs_bad_input(db_url: str) -> None:
    runner = CliRunner()
    base = ["--db-url", db_url]
    assert "is not a job id" in runner.invoke(cli, ["jobs", "show", "nope", *base]).output
    assert "unknown status" in runner.invoke(cli, ["jobs", "list", "--status", "nope", *base]).output
    assert "cannot purge pending" in runner.invoke(
        cli, ["jobs", "purge", "--status", "pending", "--older-than", "1d", "--yes", *base]).output
    everything = runner.invoke(cli, ["jobs", "retry", *base])  # no ids, no filter: needs --all
    assert everything.exit_code == 1 and "or --all to mean every job" in everything.output
    assert "no job" in runner.invoke(cli, ["jobs", "show", "00000000-0000-0000-0000-000000000000", *base]).output


def _uuid(text: str) -> UUID:
    return UUID(text)
