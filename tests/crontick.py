"""The real pg_cron tick of tests/integration/test_cron_tick.py, played in the background.

Debian's pg_cron 1.4.2 ticks once a minute, so the test waits for the next minute boundary (up to a
minute, 17 s on average in CI). The session's cluster runs pg_cron for every database, so the test's
scenario runs on a database of its own, in a process of its own (`python -m crontick HOME TEMPLATE`
in tests/: nothing a test patches in the pytest process reaches it) started when the session's first
test starts (tests/conftest.py); the test waits for what it recorded (JSON) and asserts on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
from standins.http_server import recording_server

TIMEOUT = 120.0  # seconds: up to a minute to the tick, then the delivery


@dataclass
class Tick:
    """What the database, pg_cron and the worker's HTTP server did."""

    secret: str = ""
    wakeups_before_tick: int = -1  # wake-ups recorded by the enqueue itself (its trigger is off)
    requests: int = 0  # the requests the worker's server received
    signed: str = ""  # the worker's verdict on the first one's signature when it came: ok, or why not
    run: dict[str, Any] = field(default_factory=dict)  # pg_cron's finished run
    outcome: object = None  # the wake-up's outcome once reconciled
    cron_text: list[str] = field(default_factory=list)  # cron.job commands and run details


def play(cluster: LocalCluster, template: str) -> Tick:
    """Play the scenario on a fresh database made from ``template``; dropped afterwards."""
    name = f"cron_{uuid.uuid4().hex[:12]}"
    with Database(cluster.url("postgres")).session() as admin:
        admin.execute_with_identifiers("create database {name} template {tpl}", name=name, tpl=template)
        try:
            admin.execute_with_identifiers("alter database {db} set log_statement = 'all'", db=name)
            return _observe(admin, cluster.url(name), name)
        finally:
            admin.execute("select cron.unschedule(jobid) from cron.job where database = %s", (name,))
            admin.execute_with_identifiers("drop database if exists {name} with (force)", name=name)


def _observe(admin: Session, url: str, dbname: str) -> Tick:
    tick = Tick()
    db = Database(url)
    settings = Settings(db_url=url, types={"email": TypeConfig(wake_on_insert=False)}, maintenance={})
    PgNetStandIn(url).install()
    with recording_server() as server, PgNetStandIn(url):
        deploy(db, settings, DeployOptions(), echo=lambda _m: None)
        set_secrets(db, settings, url=server.base + "/ok")
        scheduling.add(db, settings, "tick", "* * * * *", job_type="email")
        with db.session() as session:
            _clear_of_a_minute_boundary(session)  # so that no tick falls in the next 0.3 s
            tick.secret = str(session.scalar("select jobkit.secret('worker_secret')"))
            Lifecycle(session, "jobkit").enqueue(NewJob("email", {"to": "x"}))
            tick.wakeups_before_tick = int(session.scalar("select count(*) from jobkit.wakeups"))
            seen = server.wait_for(1, timeout=75)
            if seen:  # checked as it arrives: a signature is good for 60 s
                verdict = Verifier().check(seen[0].headers[HEADER], seen[0].body, [tick.secret])
                tick.requests, tick.signed = len(seen), "ok" if verdict.ok else verdict.reason
            tick.run = _wait_for_run(admin, dbname)
            deadline = time.monotonic() + 5
            while session.scalar("select jobkit.reconcile_wakeups()") == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            tick.outcome = session.scalar("select outcome from jobkit.wakeups")
    rows = admin.all("select command from cron.job union all "
                     "select coalesce(command, '') || coalesce(return_message, '') from cron.job_run_details")
    tick.cron_text = [str(r["command"]) for r in rows]
    return tick


def _clear_of_a_minute_boundary(session: Session) -> None:
    """Until the database's clock is clear of the next minute boundary (at most ~6 s)."""
    wait_for(lambda: float(session.scalar("select extract(second from clock_timestamp())")) <= 55, 10,
             "the clock clear of a minute boundary", every=0.2)


def _wait_for_run(admin: Session, dbname: str, timeout: float = 15) -> dict[str, Any]:
    seen: dict[str, dict[str, Any] | None] = {}

    def finished() -> bool:
        seen["run"] = admin.one("select d.status, d.command from cron.job_run_details d join cron.job j "
                                "using (jobid) where j.database = %s and d.status in ('succeeded', 'failed') "
                                "order by d.runid desc limit 1", (dbname,))
        return seen["run"] is not None

    wait_for(finished, timeout, "pg_cron recorded a finished run", every=0.2)
    return dict(seen["run"] or {})


class Background:
    """``play`` in a process of its own; ``wait`` returns its Tick or fails with its output."""

    def __init__(self, cluster: LocalCluster, template: str) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", "crontick", str(cluster.home), template],
                                      cwd=Path(__file__).parent, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        self._out: tuple[str, str] | None = None

    def stop(self) -> None:
        """At the end of the session: stop the scenario if it still runs (its test did not, say
        after -x; its database goes with the session's cluster)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self.join()

    def join(self) -> None:
        """Until the scenario is over, whatever its end."""
        if self._out is None:
            try:
                self._out = self._proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._out = self._proc.communicate()

    def wait(self) -> Tick:
        self.join()
        out, err = self._out or ("", "")
        assert self._proc.returncode == 0, f"the pg_cron tick scenario exited {self._proc.returncode}:\n{err}"
        return Tick(**json.loads(out.strip().splitlines()[-1]))  # the last line: the JSON


def main(home: str, template: str) -> None:
    print(json.dumps(asdict(play(LocalCluster(Path(home)), template))))


if __name__ == "__main__":
    main(*sys.argv[1:])
