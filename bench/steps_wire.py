"""`python -m bench.steps_wire [--ref REF] [--records 16] [--n 40]`: server instructions per durable
step's record as the worker sends it over the wire: its prepared save_steps_direct, with text
parameters (array literals, as before stop 33) and with binary ones (what the PostgreSQL backend
sends now); and per job, the worker's load_steps read of jobs that have no steps yet. With ``--ref``
the commit is measured too, as it sent them (its own query texts and parameters).

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
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from . import callgrind
from .baseline_venv import Side, add_ref_option, measured_sides, working_tree

PORT = 5491


def _records(name: str, k: int, n: int) -> list[Any]:
    from jobkit.jobs import StepRecord

    started = datetime(2026, 12, 6, 12, tzinfo=UTC)
    return [StepRecord(UUID(f"00000000-0000-4000-8000-{g:012d}"), 1, name, k, f'{{"i": {g}}}', None, 1,
                       started) for g in range(1, n + 1)]


def _texts(side: Side) -> dict[str, str]:
    """The side's own save_steps_direct and load_steps query texts (rendered by its jobkit)."""
    code = ("import json; from jobkit.queries import queries; q = queries('jobkit'); "
            "print(json.dumps({k: q[k] for k in ('save_steps_direct', 'load_steps')}))")
    done = subprocess.run([str(side.python), "-I", "-c", code], capture_output=True, text=True, check=True)
    texts: dict[str, str] = json.loads(done.stdout)
    return texts


Sent = tuple[str, dict[str, Any], bool]  # the query, its parameters, binary results


def _save(sql: str, binary: bool, records: list[Any]) -> Sent:
    """save_steps_direct as a worker sends it: binary (parameters and results: the backend's form
    now) or text."""
    from jobkit.lifecycle import steps_binary_params, steps_params

    if binary:
        return sql, steps_binary_params(records), True
    return sql.replace(")b", ")s"), steps_params(records), False


def _load(sql: str, binary: bool, ids: list[UUID]) -> Sent:
    """load_steps (the worker's query) of ``ids``: binary or as an array literal (text results)."""
    if binary:
        return sql, {"ids": ids}, True
    return sql.replace(")b", ")s"), {"ids": "{" + ",".join(map(str, ids)) + "}"}, False


def _has_totals(cg: Path) -> bool:
    return any(ln.startswith(("totals:", "summary:")) for ln in cg.read_text().splitlines())


class Server:
    """A copy of a deployed data directory served under callgrind (one output file per process)."""

    def __init__(self, dep: callgrind.Deployed, label: str) -> None:
        self.label, self.runs = label, 0
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

    def backend(self, statements: list[Sent], keep: Path | None = None) -> int:
        """Run ``statements`` on a connection of their own; that backend's total instructions
        (its callgrind file copied to ``keep``)."""
        with self.connect() as conn:
            pid = conn.execute("select pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            for sql, params, binary in statements:
                conn.cursor(binary=binary).execute(sql, params).fetchall()
        return self.total(pid, keep)

    def total(self, pid: int, keep: Path | None = None) -> int:
        """Backend ``pid``'s total instructions, once it has exited (its file copied to ``keep``)."""
        out = self.dir / f"cg.{pid}"
        for _ in range(600):
            if out.exists() and _has_totals(out):
                if keep is not None:
                    shutil.copy(out, keep)
                return callgrind._total(out)
            time.sleep(0.5)
        raise RuntimeError(f"no callgrind output for backend {pid}")

    def close(self) -> None:
        """A fast shutdown signalled to the postmaster itself (runuser does not pass SIGINT on)."""
        try:
            pid = int((self.dir / "pgdata" / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGINT)
        except (OSError, ValueError, IndexError):  # not started, or already gone
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _measure(server: Server, args: argparse.Namespace, what: str,
             make: Callable[[str, int], Sent], out: Path) -> None:
    """``make(name, k)``: the k-th statement of a connection whose records are named ``name``."""
    server.runs += 1
    files, totals = [out / f"{server.runs}-small.cg", out / f"{server.runs}-big.cg"], []
    for j, count in enumerate((args.warm, args.warm + args.n)):
        name = f"s{server.runs:02d}{j}"  # a step name per connection: its records meet no stored one
        totals.append(server.backend([make(name, k) for k in range(1, count + 1)], files[j]))
    per = args.n * args.records
    print(f"{server.label:32} {what:34} {(totals[1] - totals[0]) / per:>10,.0f} instructions per "
          f"{'job' if what.startswith('load') else 'record'}", flush=True)
    for row in callgrind.top(files[0], files[1], per, args.top) if args.top else []:
        print("    " + row)


def _side(side: Side, args: argparse.Namespace, out: Path) -> None:
    texts = _texts(side)
    ids = [UUID(f"00000000-0000-4000-8000-{g:012d}") for g in range(1, args.records + 1)]
    dep = callgrind.Deployed(side, fill=0)
    try:
        server = Server(dep, side.label)
        try:
            with server.connect() as conn:
                conn.execute(callgrind._running())
                for stmt in callgrind.ANALYZE.split(";"):
                    conn.execute(stmt)
            own = [")b" in texts["save_steps_direct"]] if args.ref else [False, True]
            for binary in own:  # loads first: the jobs have no steps yet (a first attempt's read)
                _measure(server, args, f"load_steps, {'binary' if binary else 'text'}",
                         lambda _n, _k, b=binary: _load(texts["load_steps"], b, ids), out)
            for _ in range(args.rounds):
                for binary in own:
                    _measure(server, args, f"save_steps_direct, {'binary' if binary else 'text'}",
                             lambda n, k, b=binary: _save(texts["save_steps_direct"], b,
                                                          _records(n, k, args.records)), out)
        finally:
            server.close()
    finally:
        dep.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.steps_wire")
    add_ref_option(ap, "this commit as it sent them")
    ap.add_argument("--records", type=int, default=16, help="records (load: jobs) per statement")
    ap.add_argument("--n", type=int, default=40, help="statements beyond the warm-up")
    ap.add_argument("--warm", type=int, default=callgrind.WARM_PLANNED, help="warm-up statements")
    ap.add_argument("--top", type=int, default=0, help="list the K biggest inclusive costs a record")
    ap.add_argument("--rounds", type=int, default=1, help="save_steps_direct measured this many times")
    ap.add_argument("--keep", type=Path, default=None, help="keep the callgrind files here")
    args = ap.parse_args()
    callgrind._set_records(args.records)
    with tempfile.TemporaryDirectory(prefix="jk-wire-out-") as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for side in measured_sides(args.ref):
            args_side = argparse.Namespace(**{**vars(args), "ref": side.label != working_tree().label})
            _side(side, args_side, out)


if __name__ == "__main__":
    main()
