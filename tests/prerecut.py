"""A database as main deployed it before issue 22's recut (96ca538): migrations 0001..N with the
functions they then carried, rendered for schema jobkit and kept under tests/fixtures/prerecut/.
Tests of a migration's data move start from here: since the recut the packaged migrations hold no
functions, so "the packaged migrations up to N" is no longer a database anyone deployed."""

from __future__ import annotations

import hashlib
from pathlib import Path

from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.schema.render import render_bootstrap

PRERECUT = Path(__file__).parent / "fixtures" / "prerecut" / "96ca538"


def deploy_prerecut(url: str, through: str = "0013") -> None:
    """Deploy main at 96ca538 as its `jobkit deploy` did, migrations 0001..``through``."""
    with Database(url).session() as s:
        for path in sorted(PRERECUT.glob("*.sql")):
            if path.name[:4] > through:
                break
            version, name = path.stem.split("_", 1)
            text = path.read_text(encoding="utf-8")
            with s.transaction():
                s.script(render_bootstrap(Settings()))
                s.script(text)
                s.execute("insert into jobkit.schema_migrations (version, name, checksum) values (%s, %s, %s)",
                          (version, name, hashlib.sha256(text.encode()).hexdigest()))
