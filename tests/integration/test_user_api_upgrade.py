"""Issue 21 Found 9, the upgrade: a deployment whose per-user API keeps owners as uuids (the
migrations before 0011 and sql/user_api.sql as it was, kept in tests/fixtures) is brought to text
owners by a plain `jobkit deploy` while it holds owned and other jobs: jobkit.jobs is not rewritten
(same relfilenode, the other jobs' rows untouched), every owner and mirrored row survives, and what
changed while 0011 had dropped the sync triggers reaches the users' table."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobkit
import pytest
from jobkit.config import RateLimitConfig, Settings, UserApiConfig
from jobkit.connector import Database, Session
from jobkit.exceptions import NotDeployed, PrerequisiteError
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.schema.migrations import apply
from jobkit.schema.render import environment, ident, render_bootstrap, render_migrations

OLD_USER_API = Path(__file__).parents[1] / "fixtures" / "user_api_before_0011.sql"
PRERECUT = Path(__file__).parents[1] / "fixtures" / "prerecut" / "96ca538"
USER = "jobkit_user"
API = UserApiConfig(schema=USER, types=("export",), limit=RateLimitConfig(rate=1.0, burst=50))
ALICE, BOB = str(uuid.uuid4()), str(uuid.uuid4())
LOCK = timedelta(seconds=10)


@pytest.fixture
def old(fresh_db: str) -> Iterator[tuple[Session, Settings]]:
    """jobkit before 0011, with the per-user API of that time (the migrations as they were then,
    functions included: tests/fixtures/prerecut)."""
    settings = Settings(db_url=fresh_db, user_api=API)
    with Database(fresh_db).session() as s:
        s.execute("create publication supabase_realtime")
        for path in sorted(PRERECUT.glob("*.sql")):
            if path.name < "0011":
                text = path.read_text(encoding="utf-8")
                with s.transaction():
                    s.script(render_bootstrap(settings) + text)
                    s.execute("insert into jobkit.schema_migrations (version, name, checksum) values (%s, %s, %s)",
                              (*path.stem.split("_", 1), hashlib.sha256(text.encode()).hexdigest()))
        context = {"schema": settings.schema, "s": ident(settings.schema), "u": ident(USER), "user_api": API}
        s.script(environment().from_string(OLD_USER_API.read_text()).render(context))
        yield s, settings


def as_user(s: Session, sub: str) -> None:
    s.execute("select set_config('request.jwt.claims', %s, false)", (json.dumps({"role": "authenticated",
                                                                                 "sub": sub}),))
    s.execute("set role authenticated")


def admin(s: Session) -> None:
    s.execute("reset role")
    s.execute("select set_config('request.jwt.claims', '', false)")


def call(s: Session, sub: str, sql: str, *args: Any) -> Any:
    as_user(s, sub)
    try:
        return s.scalar(sql, args)
    finally:
        admin(s)


def mirror(s: Session) -> dict[Any, tuple[str, str]]:
    return {r["id"]: (str(r["owner"]), r["status"]) for r in s.all(f"select id, owner, status from {USER}.jobs")}


def test_uuid_owners_become_text_without_rewriting_jobs(old: tuple[Session, Settings]) -> None:
    s, settings = old
    enqueue = f"select {USER}.enqueue('export', '{{}}')"
    a1, a2, b1 = call(s, ALICE, enqueue), call(s, ALICE, enqueue), call(s, BOB, enqueue)
    life = Lifecycle(s)
    # This jobkit's bulk enqueue needs this version's functions (enqueue_json's p_ids): against the
    # old ones it is refused with the fix named, and nothing is inserted. The old schema's own insert:
    with pytest.raises(NotDeployed, match="older than this jobkit") as refused:
        jobkit.enqueue_many(s, [NewJob("plain", {"n": n}) for n in range(50)])
    assert "jobkit deploy" in refused.value.hint
    assert s.scalar("select count(*) from jobkit.jobs where type = 'plain'") == 0
    backend = [r["id"] for r in s.all("insert into jobkit.jobs (type, payload) select 'plain', "
                                      "pg_catalog.jsonb_build_object('n', g) from generate_series(0, 49) g "
                                      "returning id")]
    [claimed] = life.claim("export", 1, "w", timedelta(minutes=5))
    assert claimed.id == a1
    assert s.scalar("select pg_catalog.format_type(atttypid, null) from pg_attribute "
                    "where attrelid = 'jobkit.jobs'::regclass and attname = 'owner'") == "uuid"
    before = s.one("select pg_relation_filenode('jobkit.jobs') as file, "
                   "(select array_agg(xmin::text order by id) from jobkit.jobs where owner is null) as rows")

    [m0011] = [m for m in render_migrations(settings) if m.version == "0011"]
    apply(s, settings, m0011, lock_timeout=LOCK)
    # Between 0011 and the user API's re-application: enqueue and cancel are closed, the rest works.
    with pytest.raises(PrerequisiteError, match="permission denied"):
        call(s, ALICE, enqueue)
    with pytest.raises(PrerequisiteError, match="permission denied"):
        call(s, ALICE, f"select {USER}.cancel(%s)", a2)
    assert call(s, ALICE, f"select count(*) from {USER}.jobs") == 2  # Alice still reads her jobs
    life.complete([(a1, claimed.attempts, json.dumps({"url": "x.csv"}))])  # not mirrored yet
    s.execute("delete from jobkit.jobs where id = %s", (b1,))                # pruned: not mirrored yet
    assert mirror(s)[a1] == (ALICE, "processing") and b1 in mirror(s)

    deploy(Database(settings.db_url or ""), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    after = s.one("select pg_relation_filenode('jobkit.jobs') as file, "
                  "(select array_agg(xmin::text order by id) from jobkit.jobs where owner is null) as rows")
    assert after == before  # no rewrite, and no row of another job written
    assert s.scalar("select count(*) from jobkit.jobs where id = any(%s) and owner is null", (backend,)) == 50
    owners = {r["id"]: r["owner"] for r in s.all("select id, owner from jobkit.jobs where owner is not null")}
    assert owners == {a1: ALICE, a2: ALICE}
    assert mirror(s) == {a1: (ALICE, "completed"), a2: (ALICE, "pending")}
    as_user(s, ALICE)
    rows = {r["id"]: r for r in s.all(f"select * from {USER}.jobs")}
    assert set(rows) == {a1, a2} and rows[a1]["result"] == {"url": "x.csv"}
    assert s.scalar(f"select {USER}.cancel(%s)", (a2,)) is True
    admin(s)
    clerk = "user_2NNEqL2nrIRdJ194ndJqAHwEfxC"
    new = call(s, clerk, enqueue)
    assert call(s, clerk, f"select count(*) from {USER}.jobs") == 1 and mirror(s)[new] == (clerk, "pending")
    # The upgraded database is exactly what a fresh deploy builds: deploy --check is clean.
    deploy(Database(settings.db_url or ""), settings, DeployOptions(schedules=False, check=True),
           echo=lambda _m: None)
