"""The two sides of `python -m bench --baseline REF`: REF built into a cached virtualenv, and the
working tree (the interpreter running the bench, with its editable jobkit).

REF is a commit or tag of this repository (``git archive`` of it, ``pip install``-ed, not
editable, into ~/.cache/jobkit-bench/<sha>/venv), or else a released version (``pip install
jobkit-pg==REF`` into ~/.cache/jobkit-bench/release-REF/venv). A finished build leaves a stamp
file; a later run reuses the venv. $JOBKIT_BENCH_CACHE moves the cache."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).resolve().parent / "baseline_driver.py"
DISTRIBUTION = "jobkit-pg"


class BaselineError(RuntimeError):
    """A one-line reason the baseline cannot run, naming the fix."""


@dataclass(frozen=True)
class Side:
    label: str  # shown in the table: "ede9fd6" or "working tree (dd2256e+)"
    python: Path

    def driver(self, figure: str, url: str, n: int) -> list[str]:
        # -I: only this interpreter's site-packages; the checkout (bench/, toolkit/) stays out of sys.path.
        return [str(self.python), "-I", str(DRIVER), figure, url, str(n)]

    def deploy(self, url: str) -> list[str]:
        return [str(self.python), "-I", "-m", "jobkit", "deploy", "--db-url", url]


def cache_root() -> Path:
    return Path(os.environ.get("JOBKIT_BENCH_CACHE", Path.home() / ".cache" / "jobkit-bench"))


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def resolve(ref: str) -> tuple[str, str]:
    """(cache key, label): the full sha for a commit or tag of this repo, else a release."""
    sha = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if sha:
        return sha, sha[:7] if sha.startswith(ref.lower()) else f"{ref} ({sha[:7]})"
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", ref):
        raise BaselineError(f"--baseline {ref!r}: neither a commit/tag of {ROOT} nor a version; "
                            "pass a sha, a tag or a released version such as 0.3.0")
    return f"release-{ref}", f"{DISTRIBUTION} {ref}"


def working_tree() -> Side:
    head = _git("log", "-1", "--format=%h") or "unknown"
    dirty = _git("status", "--porcelain", "--", "toolkit", "sql", "templates", "pyproject.toml")
    return Side(f"working tree ({head}{' + changes' if dirty else ''})", Path(sys.executable))


def add_ref_option(ap: argparse.ArgumentParser, what: str = "this commit") -> None:
    """The bench tools' ``--ref REF`` (repeatable): also measure REF, built by :func:`build`."""
    ap.add_argument("--ref", action="append", default=[], help=f"also measure {what} (repeatable)")


def measured_sides(refs: Sequence[str]) -> list[Side]:
    """The working tree first, then each ``--ref`` in the order given (built once, then cached)."""
    return [working_tree(), *(build(r) for r in refs)]


def build(ref: str, echo: object = print) -> Side:
    key, label = resolve(ref)
    home = cache_root() / key
    python = home / "venv" / "bin" / "python"
    stamp = home / "installed"
    if stamp.exists() and python.exists():
        return Side(label, python)
    say = echo if callable(echo) else print
    say(f"building {label} into {home} (once; cached afterwards)")
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    _run([sys.executable, "-m", "venv", str(home / "venv")], "create the virtualenv")
    target = DISTRIBUTION + "==" + ref if key.startswith("release-") else str(_export(key, home / "src"))
    _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", target],
         f"pip install {target}")
    stamp.write_text(ref + "\n")
    return Side(label, python)


def _export(sha: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise BaselineError(f"could not {what}: {' | '.join(tail)}; fix that and run again "
                            "(the half-built venv is rebuilt next time)")
