"""Locate the SQL and templates shipped inside the package (jobkit._sql, jobkit._templates)."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

from .exceptions import ResourceError


def sql_root() -> Traversable:
    """The packaged sql/ folder."""
    return resources.files("jobkit._sql")


def templates_root() -> Traversable:
    """The packaged templates/ folder (what `jobkit init` writes)."""
    return resources.files("jobkit._templates")


def read_text(root: Traversable, relative: str) -> str:
    """Read ``relative`` (a/b.sql) under ``root``; ResourceError when it is missing."""
    node = root
    for part in relative.split("/"):
        node = node.joinpath(part)
    try:
        return node.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise ResourceError(f"packaged file {relative} is missing") from None
