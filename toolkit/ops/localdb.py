"""The local PostgreSQL of `jobkit db start|stop|status|url`, the demo and the tests.

Under home: pgdata/, run/ (socket), postgres.log, localdb.json (port and paths). As root the server
runs as the postgres OS user, in /var/tmp/jobkit-<hash of home>/ if that user cannot reach home."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..exceptions import LocalDbError

DEFAULT_BIN = Path("/usr/lib/postgresql/15/bin")
STATE_FILE = "localdb.json"
APT_HINT = "apt-get install postgresql-15 postgresql-15-cron"
_BINARIES = ("initdb", "pg_ctl", "postgres", "psql", "pg_config")
_SOCKET_PATH_MAX = 107  # sun_path is 108 bytes including the trailing NUL
_CONF = """listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
max_connections = 200
log_statement = 'none'
"""
_NO_FSYNC = "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
_HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
_ROLES_SQL = """
select pg_catalog.format('create role %I', r)
  from pg_catalog.unnest('{anon,authenticated,service_role}'::pg_catalog.text[]) r
 where not exists (select from pg_catalog.pg_roles where rolname = r) \\gexec
alter role anon nologin noinherit; alter role authenticated nologin noinherit;
alter role service_role nologin noinherit bypassrls;
"""


@dataclass(frozen=True)
class ClusterStatus:
    running: bool
    data_dir: Path
    port: int | None
    pid: int | None
    url: str | None
    version: str | None


@dataclass(frozen=True)
class _Layout:
    data_dir: Path
    socket_dir: Path
    port: int | None


def find_pg_bin() -> Path:
    """The server bin directory: ``JOBKIT_PG_BIN``, else PostgreSQL 15's, else the newest."""
    env = os.environ.get("JOBKIT_PG_BIN")
    bin_dir = Path(env) if env else _default_bin()
    missing = [name for name in _BINARIES if not os.access(bin_dir / name, os.X_OK)]
    if missing:
        raise LocalDbError(
            f"PostgreSQL server binaries not found in {bin_dir} (missing {', '.join(missing)})",
            hint=f"{APT_HINT} (or set JOBKIT_PG_BIN to PostgreSQL 15's bin directory)",
        )
    share = _run([str(bin_dir / "pg_config"), "--sharedir"], "pg_config").strip()
    if not (Path(share) / "extension" / "pg_cron.control").is_file():
        major = bin_dir.parent.name if bin_dir.parent.name.isdigit() else "15"
        raise LocalDbError(
            f"pg_cron is not installed for the PostgreSQL in {bin_dir}",
            hint=f"apt-get install postgresql-{major}-cron",
        )
    return bin_dir


def _default_bin() -> Path:
    if DEFAULT_BIN.is_dir():
        return DEFAULT_BIN
    found = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    return max(found, key=lambda p: int(p.parent.name), default=DEFAULT_BIN)


def _run(cmd: list[str], what: str, stdin: str | None = None) -> str:
    """Run ``cmd``; its stdout, or LocalDbError naming ``what`` with its last error line."""
    try:
        proc = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, cwd="/", timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalDbError(f"cannot run {what}: {exc}") from None
    if proc.returncode != 0:
        last = ((proc.stderr or proc.stdout).strip().splitlines() or ["(no output)"])[-1]
        raise LocalDbError(f"{what} failed: {last}", hint=f"run it by hand: {' '.join(cmd)}")
    return proc.stdout


def _tail(log: Path, offset: int) -> str:
    try:
        text = log.read_bytes()[offset:].decode(errors="replace")
    except OSError:
        return "(no server log)"
    return " | ".join([ln for ln in text.splitlines() if ln.strip()][-3:]) or "(empty log)"


class LocalCluster:
    """One local PostgreSQL cluster kept under ``home``."""

    def __init__(
        self, home: Path, *, fsync: bool = True, port: int | None = None,
        preload_cron: bool = True, api_roles: bool = True,
    ) -> None:
        """``preload_cron`` / ``api_roles`` off give the plain servers the tests need."""
        self.home = Path(home).expanduser().resolve()
        self.fsync = fsync
        self.preload_cron = preload_cron
        self.api_roles = api_roles
        self._port = port
        self._hash = hashlib.sha256(str(self.home).encode()).hexdigest()[:10]
        self._as_root = os.geteuid() == 0
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        self._prefix = [runuser, "-u", "postgres", "--"] if self._as_root else []

    def start(self) -> str:
        """Start the cluster (creating it on first use); a running cluster is left alone."""
        bin_dir = find_pg_bin()
        if self._pid(self._layout()) is None:
            layout = self._prepare()
            self._configure(bin_dir, layout)
            self._launch(bin_dir, layout)
            if self.api_roles:
                self._psql(bin_dir, layout, _ROLES_SQL)
            if self.preload_cron:
                self._psql(bin_dir, layout, "create extension if not exists pg_cron")
        return self.url()

    def stop(self) -> None:
        """Stop the cluster, disconnecting open sessions; no error when it is not running."""
        layout = self._layout()
        if self._pid(layout) is not None:
            args = ["stop", "-w", "-t", "60", "-m", "fast", "-D", str(layout.data_dir)]
            _run([*self._prefix, str(find_pg_bin() / "pg_ctl"), *args], "pg_ctl stop")

    def restart(self, mode: str = "fast") -> None:
        """Restart a running cluster: ``fast`` disconnects sessions and shuts down cleanly,
        ``immediate`` kills the server (crash recovery at start; unlogged tables are emptied)."""
        if mode not in ("smart", "fast", "immediate"):
            raise LocalDbError(f"unknown shutdown mode {mode!r}", hint="use smart, fast or immediate")
        layout = self._layout()
        if self._pid(layout) is None:
            raise LocalDbError(f"the local PostgreSQL in {self.home} is not running",
                               hint="run `jobkit db start`")
        log = layout.data_dir.parent / "postgres.log"
        args = ["restart", "-w", "-t", "60", "-m", mode, "-D", str(layout.data_dir), "-l", str(log)]
        _run([*self._prefix, str(find_pg_bin() / "pg_ctl"), *args], "pg_ctl restart")

    def status(self) -> ClusterStatus:
        layout = self._layout()
        pid = self._pid(layout)
        if pid is None or layout.port is None:
            return ClusterStatus(False, layout.data_dir, layout.port, None, None, None)
        version = None
        with contextlib.suppress(LocalDbError):  # None while starting up or shutting down
            version = self._psql(find_pg_bin(), layout, "show server_version")
        return ClusterStatus(True, layout.data_dir, layout.port, pid, self.url(), version)

    def url(self, dbname: str = "postgres") -> str:
        layout = self._layout()
        if layout.port is None or self._pid(layout) is None:
            raise LocalDbError(
                f"the local PostgreSQL in {self.home} is not running", hint="run `jobkit db start`"
            )
        return f"postgresql://postgres@127.0.0.1:{layout.port}/{quote(dbname, safe='')}"

    def _layout(self) -> _Layout:
        """The layout recorded in home's state file (defaults when never started)."""
        file = self.home / STATE_FILE
        try:
            state: dict[str, Any] = json.loads(file.read_text()) if file.exists() else {}
            data_dir = Path(state.get("data_dir") or self.home / "pgdata")
            socket_dir = Path(state.get("socket_dir") or data_dir.parent / "run")
            port = state.get("port")
        except (OSError, ValueError, AttributeError) as exc:
            raise LocalDbError(f"cannot read {file}: {exc}", hint=f"delete {file}") from None
        return _Layout(data_dir, socket_dir, port if isinstance(port, int) else None)

    def _prepare(self) -> _Layout:
        """Choose (first start) or reload the layout, record it and create its directories."""
        self.home.mkdir(parents=True, exist_ok=True)
        old = self._layout() if (self.home / STATE_FILE).exists() else None
        base = old.data_dir.parent if old else self._base_dir()
        socket_dir = old.socket_dir if old else base / "run"
        if len(f"{socket_dir}/.s.PGSQL.65535") > _SOCKET_PATH_MAX:
            socket_dir = Path(f"/tmp/jobkit-{self._hash}")
        port = self._port or (old.port if old else None)
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
        layout = _Layout(base / "pgdata", socket_dir, port)
        state = {"port": port, "data_dir": str(layout.data_dir), "socket_dir": str(socket_dir)}
        (self.home / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
        for path in {base, layout.data_dir, socket_dir} - {self.home}:
            self._private_dir(path)
        (base / "postgres.log").touch()
        os.chown(base / "postgres.log", self._owner(), -1)
        return layout

    def _base_dir(self) -> Path:  # home, unless the server's OS user cannot reach it
        with contextlib.suppress(LocalDbError):
            _run([*self._prefix, "test", "-x", str(self.home)], "test")
            return self.home
        return Path(f"/var/tmp/jobkit-{self._hash}")

    def _private_dir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.stat().st_uid not in {os.geteuid(), self._owner()}:
            raise LocalDbError(f"{path} belongs to someone else", hint=f"remove {path}")
        os.chown(path, self._owner(), -1)
        path.chmod(0o700)

    def _owner(self) -> int:  # the uid the server runs as: postgres when we are root
        if not self._as_root:
            return os.geteuid()
        try:
            return pwd.getpwnam("postgres").pw_uid
        except KeyError:
            raise LocalDbError("running as root but there is no `postgres` OS user") from None

    def _pid(self, layout: _Layout) -> int | None:
        try:
            pid = int((layout.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def _configure(self, bin_dir: Path, layout: _Layout) -> None:
        """initdb on first start; (re)write jobkit.conf (postgresql.conf includes it), pg_hba."""
        if not (layout.data_dir / "PG_VERSION").is_file():
            args = ["-D", str(layout.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            args += ["--locale=C", "--no-instructions"] + ([] if self.fsync else ["--no-sync"])
            _run([*self._prefix, str(bin_dir / "initdb"), *args], "initdb")
            with (layout.data_dir / "postgresql.conf").open("a") as handle:
                handle.write("\ninclude_if_exists = 'jobkit.conf'\n")
        socket_dir = str(layout.socket_dir).replace("'", "''")
        conf = _CONF.format(port=layout.port, socket_dir=socket_dir)
        if not self.preload_cron:
            conf = "".join(line for line in conf.splitlines(True) if "cron" not in line)
        conf += "" if self.fsync else _NO_FSYNC
        (layout.data_dir / "jobkit.conf").write_text(conf)
        (layout.data_dir / "pg_hba.conf").write_text(_HBA)

    def _launch(self, bin_dir: Path, layout: _Layout) -> None:
        log = layout.data_dir.parent / "postgres.log"
        offset = log.stat().st_size
        args = ["start", "-w", "-t", "60", "-D", str(layout.data_dir), "-l", str(log)]
        with contextlib.suppress(LocalDbError):  # judged by the pid file and the log below
            _run([*self._prefix, str(bin_dir / "pg_ctl"), *args], "pg_ctl start")
        if self._pid(layout) is None:
            raise LocalDbError(
                f"PostgreSQL did not start: {_tail(log, offset)}", hint=f"read the server log {log}"
            )

    def _psql(self, bin_dir: Path, layout: _Layout, sql: str) -> str:
        args = ["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(layout.socket_dir)]
        args += ["-p", str(layout.port), "-U", "postgres", "-d", "postgres", "-f", "-"]
        return _run([str(bin_dir / "psql"), *args], "psql", stdin=sql).strip()
