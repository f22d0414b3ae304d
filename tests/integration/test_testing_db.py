"""jobkit.testing.deployed_database: the documented fixture for a real test database (README,
"Testing your handlers"): a fresh database with jobkit deployed, dropped afterwards."""

from __future__ import annotations

import jobkit
import psycopg
from jobkit.connector import Database, Session
from jobkit.ops.localdb import LocalCluster
from jobkit.testing import deployed_database


def test_deployed_database_is_fresh_deployed_and_dropped(cluster: LocalCluster, admin: Session) -> None:
    with deployed_database(cluster.url("postgres")) as url:
        name = Database(url).dbname
        assert name.startswith("jobkit_test_")
        job_id = jobkit.enqueue(url, "t", {"x": 1})
        with psycopg.connect(url) as conn:
            assert conn.execute("select count(*) from jobkit.jobs where id = %s", (job_id,)).fetchone() == (1,)
            migrations = conn.execute("select max(version) from jobkit.schema_migrations").fetchone()
            assert migrations is not None and migrations[0] >= "0006"
    assert admin.scalar("select count(*) from pg_database where datname = %(n)s", {"n": name}) == 0
