"""`jobkit doctor`: every check an operator needs at 3 a.m., each pass / warn / fail with its fix."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..config import Settings
from ..connector import Database, Session
from ..cron import schedules as scheduling
from ..cron.pg_cron import CronJobs
from ..exceptions import JobkitError
from ..queries import queries
from ..schema import presquash
from ..schema.migrations import applied_migrations, plan, rows
from ..schema.render import render_migrations
from . import triggers as row_triggers
from . import workers as worker_rows

PASS, WARN, FAIL = "pass", "warn", "fail"
BIG_TABLE_ROWS = 1_000_000
PING_PROGRESS = 5.0  # seconds between `doctor --ping`'s progress lines


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


Probe = Callable[[Session, Settings, Database], list[Check]]


def run(db: Database, settings: Settings, *, ping: bool = False, ping_timeout: float = 30,
        progress: Callable[[str], None] = lambda _m: None) -> list[Check]:
    """All checks; stops after the connection check when there is no connection."""
    try:
        with db.session(connect_timeout=5) as session:
            checks = [Check("connection", PASS, f"connected to {db.display_url}")]
            if presquash.is_presquash(rows(applied_migrations(session, settings))):
                # The other probes read today's schema and would only show raw SQL errors.
                older = presquash.message(f"database {db.dbname}")
                return [*checks, Check("schema", FAIL, older, "jobkit deploy")]
            for probe in PROBES:
                checks += _guarded(probe, session, settings, db)
                if checks[-1].name == "schema" and "not deployed" in checks[-1].detail:
                    return checks
            if ping:
                checks += _guarded(lambda s, st, d: [_ping(s, st, ping_timeout, progress)],
                                   session, settings, db)
            return checks
    except JobkitError as exc:
        return [Check("connection", FAIL, exc.message, exc.hint)]


def failed(checks: list[Check]) -> bool:
    return any(c.status == FAIL for c in checks)


def _guarded(probe: Probe, session: Session, settings: Settings, db: Database) -> list[Check]:
    try:
        return probe(session, settings, db)
    except JobkitError as exc:
        name = getattr(probe, "__name__", "check").removeprefix("_").replace("_", " ")
        return [Check(name, FAIL, exc.message, exc.hint)]


def _privileges(session: Session, settings: Settings, _db: Database) -> list[Check]:
    row = session.one(queries(settings.schema)["doctor_privileges"], {"schema": settings.schema}) or {}
    owner, user = row.get("schema_owner"), row.get("user_name")
    if owner is None and not row.get("can_create"):
        return [
            Check(
                "privileges",
                FAIL,
                f"{user} cannot create schema {settings.schema}",
                "connect as the database owner (on Supabase: postgres)",
            )
        ]
    if owner is not None and owner != user and not row.get("is_superuser"):
        return [
            Check(
                "privileges",
                FAIL,
                f"schema {settings.schema} belongs to {owner}, not {user}",
                f"connect as {owner}",
            )
        ]
    return [Check("privileges", PASS, f"{user} can manage schema {settings.schema}")]


def _pg_cron(session: Session, settings: Settings, db: Database) -> list[Check]:
    info = session.one(queries(settings.schema)["server_info"], {"schema": settings.schema}) or {}
    if not info.get("cron_available"):
        return [
            Check(
                "pg_cron",
                FAIL,
                "pg_cron is not installed",
                "on Supabase enable the Cron integration; on Debian apt-get install postgresql-15-cron",
            )
        ]
    if info.get("can_read_settings") and info.get("cron_database") is None:
        return [
            Check(
                "pg_cron",
                FAIL,
                "pg_cron is not preloaded (shared_preload_libraries)",
                "add pg_cron to shared_preload_libraries and restart (Supabase: the Cron integration)",
            )
        ]
    site = CronJobs(db, settings).site
    version = f"{site.version[0]}.{site.version[1]}" if site.version else "?"
    allows = (
        "second schedules ('30 seconds')"
        if site.version and site.version >= (1, 5)
        else "minute schedules only (seconds need pg_cron >= 1.5)"
    )
    where = (
        "jobkit's database"
        if site.cron_database == site.jobkit_database
        else f"database {site.cron_database} (jobs run in {site.jobkit_database} via schedule_in_database)"
    )
    return [Check("pg_cron", PASS, f"pg_cron {version} in {where}: {allows}")]


def _pg_net(session: Session, settings: Settings, _db: Database) -> list[Check]:
    q = queries(settings.schema)
    net = session.one(q["doctor_pg_net"], {}) or {}
    vault = session.one(q["doctor_vault"], {}) or {}
    transport = vault.get("transport")
    if transport != "pg_net":
        hint = "" if not net.get("installed") else "run `jobkit deploy` to switch to pg_net"
        return [
            Check(
                "wake transport",
                PASS if not net.get("installed") else WARN,
                f"NOTIFY on {settings.schema}_wake: run the worker with `jobkit worker serve --listen`",
                hint,
            )
        ]
    checks = [
        Check(
            "pg_net",
            PASS if net.get("installed") else FAIL,
            f"pg_net {net.get('version') or '(stand-in)'} installed"
            if net.get("installed")
            else "pg_net is not installed but the transport is pg_net",
            "" if net.get("installed") else "create extension pg_net, or deploy with transport notify",
        )
    ]
    if net.get("installed") and not net.get("worker_running"):
        checks.append(
            Check(
                "pg_net worker",
                FAIL,
                "pg_net's background worker is not running",
                "select net.worker_restart()",
            )
        )
    failures = session.all(q["doctor_wake_failures"], {})
    if failures:
        counts = ", ".join(f"{r['outcome']} {r['n']}" for r in failures)
        checks.append(
            Check(
                "wake-ups",
                WARN,
                f"last hour: {counts} (e.g. {failures[0]['example']})",
                "check the worker URL (`jobkit secrets show`) and that the worker is up",
            )
        )
    else:
        checks.append(Check("wake-ups", PASS, "no failed wake-ups in the last hour"))
    return checks


def _secrets(session: Session, settings: Settings, _db: Database) -> list[Check]:
    row = session.one(queries(settings.schema)["doctor_vault"], {}) or {}
    store = "Vault" if row.get("installed") else "jobkit.secrets (no Vault)"
    missing = [
        name for name, ok in (("worker URL", row.get("url_set")), ("signing secret", row.get("secret_set")))
        if not ok
    ]
    if not missing:
        return [Check("secrets", PASS, f"worker URL and signing secret set in {store}")]
    level = FAIL if row.get("transport") == "pg_net" else WARN
    return [
        Check(
            "secrets",
            level,
            f"{' and '.join(missing)} not set ({store})",
            "jobkit secrets set --url https://your-worker/run",
        )
    ]


def _schema_head(session: Session, settings: Settings, _db: Database) -> list[Check]:
    the_plan = plan(render_migrations(settings), applied_migrations(session, settings))
    if the_plan.head is None:
        return [Check("schema", FAIL, f"jobkit is not deployed in schema {settings.schema}", "jobkit deploy")]
    if the_plan.changed:
        names = ", ".join(a.version for a, _m in the_plan.changed)
        return [
            Check(
                "schema",
                FAIL,
                f"migration checksums differ: {names}",
                "deploy with the jobkit version and schema setting that applied them",
            )
        ]
    if the_plan.pending:
        return [
            Check("schema", FAIL, f"behind: {len(the_plan.pending)} pending migration(s)", "jobkit deploy")
        ]
    return [Check("schema", PASS, f"at head {the_plan.head}, checksums match")]


def _security(session: Session, settings: Settings, _db: Database) -> list[Check]:
    q = queries(settings.schema)
    no_rls = [r["relname"] for r in session.all(q["doctor_rls"], {"schema": settings.schema})]
    grants = session.all(q["doctor_api_grants"], {"schema": settings.schema})
    checks = []
    if no_rls:
        checks.append(
            Check(
                "row level security",
                FAIL,
                f"RLS is off on {', '.join(no_rls)}",
                f"alter table {settings.schema}.{no_rls[0]} enable row level security",
            )
        )
    else:
        checks.append(Check("row level security", PASS, "enabled on every jobkit table"))
    if grants:
        first = grants[0]
        checks.append(
            Check(
                "grants",
                FAIL,
                f"{first['role']} has privileges on {first['object']}"
                + (f" (and {len(grants) - 1} more)" if len(grants) > 1 else ""),
                f"revoke all on {first['object']} from {first['role']} (or run `jobkit deploy`)",
            )
        )
    else:
        checks.append(Check("grants", PASS, "anon and authenticated reach nothing"))
    return checks


def _schedules(session: Session, settings: Settings, db: Database) -> list[Check]:
    rows = {r.name: r for r in scheduling.rows(db, settings)}
    wanted = [name for name, spec in settings.maintenance.items() if spec is not None]
    missing = [n for n in wanted if n not in rows]
    paused = [n for n, r in rows.items() if not r.active]
    if missing:
        return [Check("schedules", FAIL, f"missing: {', '.join(missing)}", "jobkit deploy")]
    if paused:
        return [
            Check("schedules", WARN, f"paused: {', '.join(paused)}", f"jobkit schedule resume {paused[0]}")
        ]
    return [Check("schedules", PASS, f"{len(rows)} schedule(s) present and active")]


def _fairness(session: Session, settings: Settings, _db: Database) -> list[Check]:
    """Fair types and their limits, paused types and keys, jobs a fair claim cannot see, and the
    last hour's cancellations."""
    r = session.one(queries(settings.schema)["doctor_fairness"]) or {}
    fair = ", ".join(r.get("fair") or []) or "none"
    cancelled = (f"cancelled in the last hour: {r.get('cancelled_1h', 0)} "
                 f"({r.get('cancelled_running_1h', 0)} while running)")
    if r.get("keyless"):
        return [Check("concurrency", WARN,
                      f"{r['keyless']} unfinished job(s) of a fair type have no concurrency key: "
                      "no claim sees them",
                      f"give them one: update {settings.schema}.jobs set concurrency_key = '' where "
                      "concurrency_key is null and status = 'pending' and type = '<type>'")]
    paused = r.get("paused") or []
    if paused:
        first = paused[0].split(" key ")
        fix = f"jobkit resume {first[0]}" + (f" --key {first[1]}" if len(first) > 1 else "")
        detail = f"paused: {', '.join(paused)}; fair types: {fair}; {cancelled}"
        return [Check("concurrency", WARN, detail, fix)]
    return [Check("concurrency", PASS, f"fair types: {fair}; nothing paused; {cancelled}")]


def _workers(session: Session, settings: Settings, _db: Database) -> list[Check]:
    """Workers that stopped writing their heartbeat: stale ones (not marked yet) and those the
    sweep marked gone in the last hour (they ended without a clean shutdown)."""
    workers = worker_rows.read(session, settings.schema, held=0)
    n = worker_rows.counts(session, settings.schema)
    stale = [w for w in workers if w.state == "stale"]
    lost = [w for w in workers if w.gone_reason == "missed heartbeats"]
    if stale or lost:
        named = "; ".join(f"{w.id} (pid {w.pid}, last seen {round(w.seen_ago_s)}s ago, {w.state})"
                          for w in [*stale, *lost][:5])
        return [Check("workers", WARN,
                      f"{len(stale)} stale and {len(lost)} lost worker(s) stopped writing their heartbeat: "
                      f"{named}",
                      "look at that process (hung, killed or cut off from the database); its jobs return "
                      "to the queue when their leases expire (sweep-stuck)")]
    if not workers:
        return [Check("workers", PASS, "no worker has registered (workers started with --heartbeat off "
                      "are not listed)")]
    return [Check("workers", PASS, f"{n['alive']} alive, {n['gone']} stopped in the last hour")]


#: Tables that grow unless something prunes them (pg_cron's run history, pg_net's responses).
SIZED_TABLES: tuple[str, ...] = ("cron.job_run_details", "net._http_response")


def _row_triggers(session: Session, settings: Settings, _db: Database) -> list[Check]:
    """Every row trigger deploy manages ([triggers.<name>]) exists, is enabled and is unaltered."""
    managed = row_triggers.rows(session, settings)
    if not managed:
        return []
    bad = row_triggers.problems(session, settings)
    if bad:
        return [Check("row triggers", FAIL, "; ".join(bad),
                      "jobkit deploy (on a table jobkit does not own, its owner drops the trigger first)")]
    return [Check("row triggers", PASS, f"{len(managed)} present and enabled: "
                  + ", ".join(r.name for r in managed))]


def table_sizes(session: Session, settings: Settings, _db: Database) -> list[Check]:
    checks = []
    for table in SIZED_TABLES:
        row = session.one(queries(settings.schema)["doctor_table_rows"], {"table": table})
        if not row or row["bytes"] is None:
            continue
        rows, size, about = int(row["estimated_rows"]), int(row["bytes"]), "about "
        if rows < 0:  # never analyzed: count them
            rows = int(session.scalar(queries(settings.schema)["doctor_table_count"], {"table": table}))
            about = ""
        level = WARN if rows > BIG_TABLE_ROWS else PASS
        checks.append(
            Check(
                f"size of {table}",
                level,
                f"{about}{rows} rows, {size // 1024} kB",
                "keep the prune-cron-history schedule active" if level == WARN else "",
            )
        )
    return checks


def _ping(session: Session, settings: Settings, timeout: float,
          progress: Callable[[str], None] = lambda _m: None) -> Check:
    """Enqueue a jobkit.ping job: the database wakes the worker, the worker answers it. Says every
    few seconds that it is waiting; on a timeout it names what became of the wake-up (the transport,
    pg_net's answer) and removes its ping job."""
    q = queries(settings.schema)
    job_id = session.scalar(q["ping_job"], {})
    start = time.monotonic()
    said = 0.0
    row: dict[str, Any] | None = None
    while time.monotonic() - start < timeout:
        row = session.one(q["job_status"], {"id": job_id})
        if row and row["status"] not in ("pending", "processing"):
            break
        if time.monotonic() - start >= said + PING_PROGRESS:
            said += PING_PROGRESS
            progress(f"ping: waiting for the worker ({said:.0f}s of {timeout:.0f}s)")
        time.sleep(0.2)  # a bounded poll of the ping job's row
    if row and row["status"] == "completed":
        return Check(
            "ping", PASS, f"round trip through the database: answered by {row['result'].get('pong')}"
        )
    session.execute(q["ping_job_delete"], {"id": job_id})
    status = row["status"] if row else "gone"
    detail = f"no answer within {timeout:.0f}s (ping job {status}, removed)"
    if row and row["last_error"]:
        detail += f": {row['last_error']}"
    return Check("ping", FAIL, detail, _ping_fix(session.one(q["ping_wakeup"], {})))


def _ping_fix(wakeup: dict[str, Any] | None) -> str:
    """What to do, from the wake transport and what became of the ping's wake-up."""
    if wakeup is None or wakeup["transport"] == "notify":
        return ("the database wakes workers with NOTIFY: run the worker with `jobkit worker serve --listen` "
                "(an HTTP-only worker never hears it)")
    if not wakeup["sent"]:
        return "no wake-up was sent over pg_net: is wake_on_insert off for jobkit.ping? run `jobkit deploy`"
    if wakeup["outcome"] in ("failed", "timed_out"):
        code = f" (HTTP {wakeup['status_code']})" if wakeup["status_code"] else ""
        return (f"pg_net's call to the worker {wakeup['outcome'].replace('_', ' ')}{code}: "
                f"{wakeup['error'] or 'no error text'}; check `jobkit secrets show` and that the URL reaches "
                "the worker")
    return ("pg_net sent the wake-up: is the worker running, and does it serve the ping's type? "
            "`jobkit status`")


PROBES: list[Probe] = [
    _privileges,
    _pg_cron,
    _schema_head,
    _security,
    _pg_net,
    _secrets,
    _schedules,
    _fairness,
    _row_triggers,
    _workers,
    table_sizes,
]
