"""`python -m bench.steps_wire [--records 16] [--n 60]`: server instructions per durable step's record
as the worker sends it over the wire: its prepared save_steps_direct, with text parameters (array
literals, as before stop 33) and with binary ones (what the PostgreSQL backend sends now).

bench.callgrind's stepsq runs in single-user mode, where parameters can only be literals of an
EXECUTE: it cannot show how parameters are received. Here the working tree is deployed as
bench.callgrind deploys it, then a copy of the data directory is served by a postmaster under
valgrind's callgrind (fsync on, no preloaded libraries), and psycopg connects through its Unix
socket. Each measured connection (one backend: callgrind writes one file per process) runs
``--warm`` statements, or ``--warm + --n``; the difference of the two backends' totals divided by
the extra records is what a record costs the server: bind (the parameters' input functions),
plan-cache lookup, executor start, run and finish, commit (fsync'd WAL). The client is not counted.
Every statement writes ``--records`` records, one for each of as many running jobs (attempt 1),
under a step name of its connection's own, as the worker's group commit sends them."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from . import callgrind
from .baseline_venv import working_tree

PORT = 5491


def _records(name: str, k: int, n: int) -> list[Any]:
    from jobkit.jobs import StepRecord

    started = datetime(2026, 12, 6, 12, tzinfo=UTC)
    return [StepRecord(UUID(f"00000000-0000-4000-8000-{g:012d}"), 1, name, k, f'{{"i": {g}}}', None, 1,
                       started) for g in range(1, n + 1)]


def _statement(binary: bool, records: list[Any]) -> tuple[str, dict[str, Any]]:
    """save_steps_direct as the worker sends it: binary (the backend's form now) or text."""
    from jobkit.lifecycle import Statements, steps_params

    direct = Statements().save_steps_direct(records)
    assert direct is not None
    if binary:
        return direct.sql, dict(direct.params)
    return direct.sql.replace(")b", ")s"), steps_params(records)


def _has_totals(cg: Path) -> bool:
    return any(ln.startswith(("totals:", "summary:")) for ln in cg.read_text().splitlines())


class Server:
    """A copy of a deployed data directory served under callgrind (one output file per process)."""

    def __init__(self, dep: callgrind.Deployed) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jk-wire-", dir="/var/tmp"))
        data = self.dir / "pgdata"
        subprocess.run(["cp", "-a", str(dep.data), str(data)], check=True)
        os.chmod(self.dir, 0o777)
        os.chown(self.dir, callgrind._uid(), -1)
        cmd = ["runuser", "-u", "postgres", "--", "valgrind", "--tool=callgrind",
               f"--callgrind-out-file={self.dir}/cg.%p", str(callgrind._postgres()), "-D", str(data),
               "-p", str(PORT), "-k", str(self.dir), "-c", "listen_addresses=", "-c", "fsync=on",
               "-c", "shared_preload_libraries=", "-c", "autovacuum=off"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.db = dep.db
        deadline = time.monotonic() + 300
        while not (self.dir / f".s.PGSQL.{PORT}").exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the postmaster under callgrind did not start")
            time.sleep(0.5)
        time.sleep(2)  # the socket exists before the server accepts connections

    def connect(self) -> Any:
        import psycopg

        for _ in range(120):
            try:
                return psycopg.connect(host=str(self.dir), port=PORT, user="postgres", dbname=self.db,
                                       autocommit=True, prepare_threshold=0)
            except psycopg.OperationalError:
                time.sleep(1)
        raise RuntimeError("cannot connect to the postmaster under callgrind")

    def backend(self, statements: list[tuple[str, dict[str, Any]]], keep: Path | None = None) -> int:
        """Run ``statements`` on a connection of their own; that backend's total instructions
        (its callgrind file copied to ``keep``)."""
        with self.connect() as conn:
            pid = conn.execute("select pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            for sql, params in statements:
                rows = conn.execute(sql, params).fetchall()
                assert len(rows) == len(params["names"]), rows
        out = self.dir / f"cg.{pid}"
        for _ in range(600):
            if out.exists() and _has_totals(out):
                if keep is not None:
                    shutil.copy(out, keep)
                return callgrind._total(out)
            time.sleep(0.5)
        raise RuntimeError(f"no callgrind output for backend {pid}")

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)  # the postmaster's fast shutdown
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _measure(server: Server, args: argparse.Namespace, i: int, binary: bool, out: Path) -> None:
    files, totals = [out / f"{i}-small.cg", out / f"{i}-big.cg"], []
    for j, count in enumerate((args.warm, args.warm + args.n)):
        name = f"s{i:02d}{j}"  # a step name per connection: its records meet no stored one
        totals.append(server.backend([_statement(binary, _records(name, k, args.records))
                                      for k in range(1, count + 1)], files[j]))
    records = args.n * args.records
    print(f"{'binary' if binary else 'text':6} parameters, {args.records} records a statement: "
          f"{(totals[1] - totals[0]) / records:>10,.0f} instructions per record", flush=True)
    for row in callgrind.top(files[0], files[1], records, args.top) if args.top else []:
        print("    " + row)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.steps_wire")
    ap.add_argument("--records", type=int, default=16, help="records per statement")
    ap.add_argument("--n", type=int, default=60, help="statements beyond the warm-up")
    ap.add_argument("--warm", type=int, default=callgrind.WARM_PLANNED, help="warm-up statements")
    ap.add_argument("--top", type=int, default=0, help="list the K biggest inclusive costs a record")
    ap.add_argument("--rounds", type=int, default=2, help="text/binary pairs measured")
    args = ap.parse_args()
    callgrind._set_records(args.records)
    dep = callgrind.Deployed(working_tree(), fill=0)
    try:
        server = Server(dep)
        try:
            with server.connect() as conn:
                conn.execute(callgrind._running())
                for stmt in callgrind.ANALYZE.split(";"):
                    conn.execute(stmt)
            with tempfile.TemporaryDirectory(prefix="jk-wire-out-") as tmp:
                for i, binary in enumerate((False, True) * args.rounds):
                    _measure(server, args, i, binary, Path(tmp))
        finally:
            server.close()
    finally:
        dep.close()


if __name__ == "__main__":
    main()
