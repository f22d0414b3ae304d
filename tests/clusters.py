"""Real PostgreSQL clusters for the tests, started with jobkit's own LocalCluster."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobkit.ops.localdb import LocalCluster


@contextmanager
def running_cluster(home: Path, *, durable: bool = False, **flags: bool) -> Iterator[LocalCluster]:
    """A started LocalCluster, stopped and removed afterwards. Fast (fsync and synchronous_commit
    off) unless ``durable``: a crash (restart -m immediate) of a fast cluster loses commits that
    were already acknowledged, which no production database does."""
    local = LocalCluster(home, fsync=durable, **flags)
    local.start()
    data_dir = local.status().data_dir
    try:
        yield local
    finally:
        local.stop()
        if not data_dir.is_relative_to(local.home):  # moved out of a home postgres cannot reach
            shutil.rmtree(data_dir.parent, ignore_errors=True)
