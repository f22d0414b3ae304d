"""Where a one-row insert's instructions go in jobkit's row trigger (issue 24, stop 33):
`python -m bench.triggers_parts [--n N] [--repeat R]`

bench.triggers_callgrind's deployment (the working tree, ``[triggers.welcome]`` on bench.triggers'
``events`` table, NOTIFY transport, callgrind over ``postgres --single``, fsync on; per row, (Ir of
2 + N one-row INSERTs - Ir of 2) / N). The deployed trigger is re-pointed, in the measured script's
first line, at functions derived from the deployed one, so that each part is the difference between
two lines:

- ``no trigger``: the trigger disabled;
- ``empty, plain``: a trigger function that only returns (no SECURITY DEFINER, no SET): the
  statement trigger, its transition table and a plpgsql call;
- ``empty``: the same, SECURITY DEFINER with ``set search_path = ''`` as jobkit's are;
- ``staging``: the deployed function without its wake-up (its insert into row_inbox);
- ``staging + empty call``: the deployed function calling, in place of ``_wake_for``, a SECURITY
  DEFINER plpgsql function with a pinned search_path that returns at once;
- ``deployed``: the trigger as deployed (staging and ``_wake_for``).

The last line moves by a few thousand between runs (``_wake_needed`` records a wake-up at most once a
second of wall clock, and valgrind's runs differ in length); ``--repeat`` runs every line again.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql as psql

from .baseline_venv import working_tree
from .triggers_callgrind import WARM, TriggerSide, script

STUB = ("create function jobkit.bench_parts_stub(p_type text, p_due bigint, p_at timestamptz) returns void "
        "language plpgsql security definer set search_path = '' as $$ begin return; end $$")
EMPTY = ("create function jobkit.bench_parts_{name}() returns trigger language plpgsql {opts} "
         "as $$ begin return null; end $$")
WAKE = re.compile(r"\n\s*if [^\n]*\n(\s*--[^\n]*\n)*\s*jobkit_void := [^\n]*_wake_for\([^\n]*\n\s*end if;")


def variants(fn: str) -> dict[str, str | None]:
    """Each variant's function (its name under jobkit), from the deployed function's definition."""
    if not WAKE.search(fn):
        raise RuntimeError("the deployed trigger has no `if ... then ... _wake_for(...) ... end if;` block")
    return {"no trigger": None, "empty, plain": "bench_parts_plain", "empty": "bench_parts_empty",
            "staging": "bench_parts_staging", "staging + empty call": "bench_parts_stubbed",
            "deployed": ""}


def setup(url: str) -> tuple[str, dict[str, str | None]]:
    """Create the variants' functions in the deployed database; the trigger's name and the variants."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("select t.tgname, p.proname, pg_get_functiondef(p.oid) from pg_trigger t "
                           "join pg_proc p on p.oid = t.tgfoid where t.tgrelid = 'public.events'::regclass "
                           "and not t.tgisinternal").fetchone()
        if row is None:
            raise RuntimeError("no row trigger on public.events")
        trigger, proname, fn = row
        found = variants(fn)
        conn.execute(STUB)
        conn.execute(EMPTY.format(name="plain", opts=""))
        conn.execute(EMPTY.format(name="empty", opts="security definer set search_path = ''"))
        head = f"FUNCTION jobkit.{proname}()"
        conn.execute(WAKE.sub("", fn).replace(head, "FUNCTION jobkit.bench_parts_staging()", 1))
        conn.execute(fn.replace(head, "FUNCTION jobkit.bench_parts_stubbed()", 1)
                     .replace('"jobkit"._wake_for(', "jobkit.bench_parts_stub("))
        found["deployed"] = proname
        return psql.Identifier(trigger).as_string(conn), found


def first_line(trigger: str, fn: str | None) -> str:
    if fn is None:
        return "alter table public.events disable trigger user\n"
    return (f"create or replace trigger {trigger} after insert on public.events referencing new table as "
            f"jobkit_new for each statement execute function jobkit.{fn}()\n")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.triggers_parts")
    ap.add_argument("--n", type=int, default=200, help="one-row INSERTs beyond the warm-up")
    ap.add_argument("--repeat", type=int, default=1, help="run every line this many times")
    args = ap.parse_args()
    dep = TriggerSide(working_tree(), "jobkit")
    try:
        dep.cluster.local.start()
        trigger, found = setup(dep.cluster.url(dep.db))
        dep.cluster.local.stop()
        small, rows_small = script("single", WARM)
        big, rows_big = script("single", WARM + args.n)
        with tempfile.TemporaryDirectory(prefix="jk-parts-") as tmp:
            for _ in range(args.repeat):
                for label, fn in found.items():
                    pre = first_line(trigger, fn)
                    a = dep.instructions(pre + small, Path(tmp) / "small.cg")
                    b = dep.instructions(pre + big, Path(tmp) / "big.cg")
                    per = (b - a) / (rows_big - rows_small)
                    print(f"{label:24} {per:>10,.0f} instructions per row", flush=True)
    finally:
        dep.close()


if __name__ == "__main__":
    main()
