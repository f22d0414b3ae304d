"""The benchmark's own PostgreSQL: a jobkit LocalCluster (fsync on) in a temp dir, one template
database per system, and a fresh database (copied from its template) for every measurement."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.ops.localdb import LocalCluster, find_pg_bin
from jobkit.schema.deploy import DeployOptions, deploy

#: Server settings applied to every system alike (ALTER SYSTEM + restart). fsync and
#: synchronous_commit stay on: every commit waits for its WAL flush, as in production.
SERVER_SETTINGS = {
    "shared_buffers": "512MB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "15min",
}


class BenchCluster:
    """Start with ``start()``; ``database(system)`` yields a fresh database URL. ``attach(local)``
    borrows a running cluster instead (the tests' session cluster): its settings are left alone and
    only the databases made here are dropped afterwards."""

    def __init__(self, echo: Callable[[str], None] = print, extra: dict[str, str] | None = None) -> None:
        self.echo = echo
        self.settings = {**SERVER_SETTINGS, **(extra or {})}
        self.home = Path(tempfile.mkdtemp(prefix="jobkit-bench-"))
        self.local = LocalCluster(self.home, fsync=True)
        self.owned = True
        self._prefix = "tpl"
        self._templates: dict[str, str] = {}
        self._installers: dict[str, Callable[[str], None]] = {"jobkit": install_jobkit}

    @classmethod
    def attach(cls, local: LocalCluster) -> BenchCluster:
        bench = cls.__new__(cls)
        bench.echo, bench.settings, bench.local, bench.owned = print, {}, local, False
        bench.home = local.home
        bench._prefix = f"tpl{uuid.uuid4().hex[:6]}"
        bench._templates, bench._installers = {}, {"jobkit": install_jobkit}
        return bench

    def start(self) -> BenchCluster:
        if not self.owned:
            return self
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> BenchCluster:
        self.local.start()
        with self.admin() as admin:
            for key, value in self.settings.items():
                items = ", ".join(f"'{v.strip()}'" for v in value.split(","))  # list settings
                admin.execute_with_identifiers(f"alter system set {{k}} = {items}", k=key)
        self.local.stop()
        self.local.start()
        return self

    def reload_setting(self, key: str, value: str | None) -> None:
        """ALTER SYSTEM SET (or RESET, for None) a reloadable setting, then reload (own cluster only)."""
        if not self.owned:
            return
        with self.admin() as admin:
            if value is None:
                admin.execute_with_identifiers("alter system reset {k}", k=key)
            else:
                admin.execute_with_identifiers(f"alter system set {{k}} = '{value}'", k=key)
            admin.execute("select pg_reload_conf()")

    def stop(self) -> None:
        if not self.owned:
            with self.admin() as admin:
                for name in self._templates.values():
                    admin.execute_with_identifiers("drop database if exists {n} with (force)", n=name)
            return
        data_dir = None
        with contextlib.suppress(Exception):
            data_dir = self.local.status().data_dir
        with contextlib.suppress(Exception):
            self.local.stop()
        if data_dir is not None and not data_dir.is_relative_to(self.home):
            shutil.rmtree(data_dir.parent, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> BenchCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, dbname: str = "postgres") -> str:
        return self.local.url(dbname)

    @property
    def port(self) -> int:
        return int(self.url().rsplit(":", 1)[1].split("/", 1)[0])

    @contextlib.contextmanager
    def admin(self) -> Iterator[Session]:
        with Database(self.url()).session() as session:
            yield session

    def register(self, system: str, installer: Callable[[str], None]) -> None:
        """``installer(url)`` installs ``system`` into an empty database (run once, for the template)."""
        self._installers[system] = installer

    def template(self, system: str) -> str:
        if system not in self._templates:
            name = f"{self._prefix}_{system.replace('-', '_')}"
            with self.admin() as admin:
                admin.execute_with_identifiers("drop database if exists {n} with (force)", n=name)
                admin.execute_with_identifiers("create database {n}", n=name)
            self._installers[system](self.url(name))
            with self.admin() as admin:  # no connection may linger on a template
                admin.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                              "where datname = %s and pid <> pg_backend_pid()", (name,))
            self._templates[system] = name
        return self._templates[system]

    @contextlib.contextmanager
    def database(self, system: str) -> Iterator[str]:
        """A fresh database with ``system`` installed; dropped afterwards."""
        template = self.template(system)
        name = f"b_{system.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        with self.admin() as admin:
            admin.execute_with_identifiers("create database {n} template {t}", n=name, t=template)
        try:
            yield self.url(name)
        finally:
            with self.admin() as admin:
                admin.execute_with_identifiers("drop database if exists {n} with (force)", n=name)

    def server_version(self) -> str:
        with self.admin() as admin:
            return str(admin.scalar("show server_version"))

    def settings_line(self) -> str:
        with self.admin() as admin:
            names = [*SERVER_SETTINGS, "fsync", "synchronous_commit", "max_connections"]
            rows = admin.all("select name, setting, unit from pg_settings where name = any(%s) order by name",
                             (names,))
        return ", ".join(f"{r['name']}={r['setting']}{r['unit'] or ''}" for r in rows)


def install_jobkit(url: str) -> None:
    deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False), echo=lambda _m: None)


def pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def jobkit_dirs() -> tuple[Path, Path]:
    """Where the imported jobkit's Python code and SQL live (a checkout or a --snapshot copy)."""
    import jobkit
    from jobkit.resources import sql_root

    return Path(jobkit.__file__).resolve().parent, Path(str(sql_root())).resolve()


def code_fingerprint() -> str:
    """A hash of the imported jobkit's code and SQL: drain processes spawned mid-run import it
    afresh, so a change during a run would mix versions in the figures."""
    import hashlib

    digest = hashlib.sha256()
    for folder in jobkit_dirs():
        for path in sorted(p for p in folder.rglob("*") if p.suffix in (".py", ".sql")):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    debian = ""
    with contextlib.suppress(OSError):
        debian = " (Debian " + Path("/etc/debian_version").read_text().strip() + ")"
    root = Path(__file__).resolve().parents[1]
    if os.environ.get("JOBKIT_BENCH_SNAPSHOT"):
        commit = os.environ["JOBKIT_BENCH_SNAPSHOT"][:90] + f" (frozen copy in {jobkit_dirs()[0].parent})"
    else:
        git = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "toolkit", "sql"],
                               capture_output=True, text=True).stdout.strip()
        commit = (git[:90] or "unknown") + (" (+ uncommitted changes in toolkit/ or sql/)" if dirty else "")
    pgbench = find_pg_bin() / "pgbench"
    pgbench_v = subprocess.run([str(pgbench), "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores", "memory": mem,
        "os": f"{platform.system()} {platform.release()}{debian}",
        "python": platform.python_version(), "pgbench": pgbench_v,
        "jobkit": f"{pkg_version('jobkit')}, commit {commit}", "psycopg": pkg_version("psycopg"),
        "pgqueuer": pkg_version("pgqueuer"), "asyncpg": pkg_version("asyncpg"),
        "procrastinate": pkg_version("procrastinate"),
    }
