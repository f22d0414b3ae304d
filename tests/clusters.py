"""Real PostgreSQL clusters for the tests, started with jobkit's own LocalCluster."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobkit.localdb import LocalCluster


@contextmanager
def running_cluster(home: Path, **flags: bool) -> Iterator[LocalCluster]:
    """A started LocalCluster (fsync off), stopped and removed afterwards."""
    local = LocalCluster(home, fsync=False, **flags)
    local.start()
    data_dir = local.status().data_dir
    try:
        yield local
    finally:
        local.stop()
        if not data_dir.is_relative_to(local.home):  # moved out of a home postgres cannot reach
            shutil.rmtree(data_dir.parent, ignore_errors=True)
