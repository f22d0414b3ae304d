"""A real pg_cron tick (Debian's 1.4.2: minute granularity) wakes the worker through pg_net, and the
worker's secret appears nowhere it must not: cron.job, cron.job_run_details, the server log."""

from __future__ import annotations

import time

from jobkit.config import Settings, TypeConfig
from jobkit.connector import Database, Session
from jobkit.cron import schedules as scheduling
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.secrets import set_secrets
from jobkit.worker.signing import HEADER, Verifier
from poll import wait_for
from standins import PgNetStandIn
from standins.http_server import Server


def test_a_real_pg_cron_tick_wakes_the_worker(
    cluster: LocalCluster, admin: Session, db_url: str, server: Server
) -> None:
    db = Database(db_url)
    admin.execute_with_identifiers("alter database {db} set log_statement = 'all'", db=db.dbname)
    settings = Settings(db_url=db_url, types={"email": TypeConfig(wake_on_insert=False)}, maintenance={})
    PgNetStandIn(db_url).install()
    with PgNetStandIn(db_url):
        deploy(db, settings, DeployOptions(), echo=lambda _m: None)
        set_secrets(db, settings, url=server.base + "/ok")
        scheduling.add(db, settings, "tick", "* * * * *", job_type="email")
        with db.session() as session:
            _clear_of_a_minute_boundary(session)  # so that no tick falls in the next 0.3 s
            secret = str(session.scalar("select jobkit.secret('worker_secret')"))
            Lifecycle(session, "jobkit").enqueue(NewJob("email", {"to": "x"}))
            # The insert trigger is off for email: it sent nothing, only cron wakes it.
            assert session.scalar("select count(*) from jobkit.wakeups") == 0
            seen = server.wait_for(1, timeout=75)
            assert seen and Verifier().check(seen[0].headers[HEADER], seen[0].body, [secret]).ok
            run = _wait_for_run(admin, db.dbname)
            assert run["status"] == "succeeded"
            assert "wake('email')" in str(run["command"])
            deadline = time.monotonic() + 5
            while session.scalar("select jobkit.reconcile_wakeups()") == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert session.scalar("select outcome from jobkit.wakeups") == "delivered"
    cron_text = admin.all("select command from cron.job union all "
                          "select coalesce(command, '') || coalesce(return_message, '') from cron.job_run_details")
    assert cron_text and not any(secret in str(r["command"]) for r in cron_text)
    log = (cluster.status().data_dir.parent / "postgres.log").read_text(errors="replace")
    assert "jobkit.wake" in log or "wake(" in log  # statement logging was on
    assert secret not in log


def _clear_of_a_minute_boundary(session: Session) -> None:
    """Until the database's clock is clear of the next minute boundary (at most ~6 s)."""
    wait_for(lambda: float(session.scalar("select extract(second from clock_timestamp())")) <= 55, 10,
             "the clock clear of a minute boundary", every=0.2)


def _wait_for_run(admin: Session, dbname: str, timeout: float = 15) -> dict[str, object]:
    seen: dict[str, dict[str, object] | None] = {}

    def finished() -> bool:
        seen["run"] = admin.one("select d.status, d.command from cron.job_run_details d join cron.job j "
                                "using (jobid) where j.database = %s and d.status in ('succeeded', 'failed') "
                                "order by d.runid desc limit 1", (dbname,))
        return seen["run"] is not None

    wait_for(finished, timeout, "pg_cron recorded a finished run", every=0.2)
    return dict(seen["run"] or {})
