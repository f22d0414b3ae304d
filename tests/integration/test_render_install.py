"""`jobkit render`'s script really installs jobkit, in the schema the settings name."""

from __future__ import annotations

from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.schema.render import render_script
from versions import HEAD


def test_rendered_script_installs_jobkit_in_a_custom_schema(fresh_db: str) -> None:
    with Database(fresh_db).session() as s:
        s.script(render_script(Settings(schema="app_jobs")))
        job_id = s.scalar("select app_jobs.enqueue('t', '{}')")
        assert s.scalar("select count(*) from app_jobs.pick_jobs('t', 5, 'w', '1 minute')") == 1
        assert s.scalar("select app_jobs.complete_job(%s, 1, null)", (job_id,)) is True
        assert s.scalar("select max(version) from app_jobs.schema_migrations") == HEAD
        assert s.scalar("select count(*) from pg_namespace where nspname = 'jobkit'") == 0


