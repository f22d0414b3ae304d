"""Server instructions per inserted row, with and without a declared row trigger (issue 24):
`python -m bench.triggers_callgrind [--ref REF ...] [--n N] [--ops single,bulk,bulkmove] [--top K]`

The wall-clock bench (`python -m bench.triggers`) moves by 2-3x on a shared machine; this one counts
instructions, as bench.callgrind does (its Deployed side, callgrind over ``postgres --single`` on a
copy of a deployed data directory, fsync on; the difference between a run of WARM and one of WARM +
N operations, per row, so start-up cancels out). Each side (the working tree, and each REF built as
bench.callgrind builds it) is deployed twice, into databases with bench.triggers' app table
``events (id bigint primary key, user_id int, email text, body text)``:

- ``none``: no trigger;
- ``jobkit``: ``[triggers.welcome]`` (insert, type send_welcome, payload ["id", "email"]), as
  bench.triggers declares it; NOTIFY transport (single-user mode has no pg_net);
- ``jobkit-nowake`` (``--variants``): the same with ``wake_on_insert = false`` for the type, which
  leaves out the engine's wake-up path (_wake_for returns after its first read).

Operations (each statement its own transaction, prepared once):
- single: one-row INSERTs, per transaction;
- bulk: INSERTs of 1,000 rows, per row;
- bulkmove: the same, each followed by ``select jobkit.move_row_inbox()`` (the move a claim or the
  stuck sweep makes off the inserting transaction; sides without it fail), per row. bulkmove - bulk
  is what making the staged rows jobs costs, later and elsewhere.

Prints one line per side, variant and operation, and the ratio jobkit / none (the issue's targets:
x1.30 single-row, x2 for 1,000-row statements).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import psycopg

from .baseline_venv import Side, add_ref_option, measured_sides
from .callgrind import Deployed, top
from .triggers import TABLE, TRIGGER

BULK = 1_000
WARM = 2
PREPARE = {
    "single": ("prepare op(bigint) as insert into public.events (id, user_id, email, body) "
               "values ($1, $1::int, 'u' || $1 || '@example.com', 'hello')"),
    "bulk": ("prepare op(bigint) as insert into public.events (id, user_id, email, body) "
             "select g, g::int, 'u' || g || '@example.com', 'hello' "
             f"from generate_series($1, $1 + {BULK - 1}) g"),
}
PREPARE["bulkmove"] = PREPARE["bulk"]
VARIANTS = ("none", "jobkit", "jobkit-nowake")


def script(op: str, count: int) -> tuple[str, int]:
    """The statements of ``count`` operations, and how many rows they insert."""
    lines = [PREPARE[op]]
    if op == "single":
        lines += [f"execute op({i})" for i in range(1, count + 1)]
        return "\n".join(lines) + "\n", count
    for i in range(count):
        lines.append(f"execute op({i * BULK + 1})")
        if op == "bulkmove":
            lines.append("select jobkit.move_row_inbox()")
    return "\n".join(lines) + "\n", count * BULK


def toml(variant: str) -> str:
    if variant == "none":
        return ""
    (name, spec), = TRIGGER.items()
    body = "\n".join(f"{k} = {_value(v)}" for k, v in spec.items())
    off = f"[types.{spec['type']}]\nwake_on_insert = false\n" if variant == "jobkit-nowake" else ""
    return f"[triggers.{name}]\n{body}\n{off}"


def _value(v: object) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(f'"{x}"' for x in v) + "]"
    return f'"{v}"'


def installer(side: Side, variant: str) -> Callable[[str], None]:
    def install(url: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(TABLE)
        with tempfile.TemporaryDirectory(prefix="jk-trig-") as tmp:
            config = Path(tmp) / "jobkit.toml"
            config.write_text(toml(variant))
            done = subprocess.run(side.deploy(url), capture_output=True, text=True, check=False,
                                  cwd=tmp, env={**os.environ, "JOBKIT_CONFIG": str(config)})
            if done.returncode != 0:
                raise RuntimeError(f"deploy of {side.label} ({variant}) failed: {done.stderr[-400:]}")
    return install


class TriggerSide(Deployed):
    """bench.callgrind's Deployed, with the app table and (for ``jobkit``) the row trigger."""

    def __init__(self, side: Side, variant: str) -> None:  # noqa: D107 - Deployed's, with a variant
        from .cluster import BenchCluster

        self.side = side
        self.cluster = BenchCluster(echo=lambda _m: None).start()
        self.cluster.register("side", installer(side, variant))
        self.db = self.cluster.template("side")
        self.data = self.cluster.local.status().data_dir
        self.cluster.local.stop()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.triggers_callgrind")
    add_ref_option(ap)
    ap.add_argument("--n", type=int, default=200,
                    help="single: rows beyond the warm-up; bulk: N/50 statements")
    ap.add_argument("--ops", default="single,bulk", help="any of single,bulk,bulkmove")
    ap.add_argument("--variants", default="none,jobkit", help="any of " + ",".join(VARIANTS))
    ap.add_argument("--top", type=int, default=0, help="list the K biggest inclusive costs per variant")
    args = ap.parse_args()
    sides = measured_sides(args.ref)
    with tempfile.TemporaryDirectory(prefix="jk-cg-out-") as tmp:
        for side in sides:
            for op in args.ops.split(","):
                per = {v: _measure(side, v, op, args, Path(tmp)) for v in VARIANTS
                       if v == "jobkit" or (op != "bulkmove" and v in args.variants.split(","))}
                for v, cost in per.items():
                    print(f"{side.label:40} {v:13} {op:9} {cost:>14,.0f} instructions per row",
                          flush=True)
                for v in (x for x in per if x != "none" and "none" in per):
                    print(f"{side.label:40} {v + '/none':22} {op:9} x{per[v] / per['none']:.2f}", flush=True)


def _measure(side: Side, variant: str, op: str, args: argparse.Namespace, outdir: Path) -> float:
    n = args.n if op == "single" else max(args.n // 50, 2)
    dep = TriggerSide(side, variant)
    try:
        small, rows_small = script(op, WARM)
        big, rows_big = script(op, WARM + n)
        a = dep.instructions(small, outdir / f"{variant}-{op}-small.cg")
        b = dep.instructions(big, outdir / f"{variant}-{op}-big.cg")
        rows = rows_big - rows_small
        if args.top:
            for line in top(outdir / f"{variant}-{op}-small.cg", outdir / f"{variant}-{op}-big.cg", rows,
                            args.top):
                print("    " + line)
        return (b - a) / rows
    finally:
        dep.close()


if __name__ == "__main__":
    main()
