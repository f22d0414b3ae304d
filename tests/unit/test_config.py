"""Config: one reader, strict validation, documented URL precedence (acceptance 9)."""

from __future__ import annotations

import tomllib
from datetime import timedelta
from pathlib import Path

import pytest
from jobkit.config import load_settings, parse_settings
from jobkit.exceptions import ConfigError


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(env={})
    assert settings.schema == "jobkit" and settings.db_url is None and settings.source is None
    assert settings.defaults.max_attempts == 3 and settings.defaults.lease == timedelta(minutes=5)
    assert settings.defaults.backoff.base == timedelta(seconds=30) and settings.defaults.backoff.factor == 4


def test_types_inherit_defaults(sample_config: Path) -> None:
    settings = load_settings(sample_config, env={})
    email = settings.type_config("email")
    assert email.max_attempts == 5 and email.lease == timedelta(minutes=2)
    assert email.backoff.base == timedelta(seconds=10) and email.backoff.factor == 2
    assert email.backoff.cap == timedelta(hours=1)
    assert settings.type_config("other") == settings.defaults


@pytest.mark.parametrize(("doc", "message"), [
    ({"schema": "x; drop table y"}, "not a valid schema name"),
    ({"schema": "public"}, "reserved or exposed"),
    ({"schema": "pg_jobs"}, "not a valid schema name"),
    ({"defaults": {"max_attempts": -1}}, "max_attempts must be an integer from 1 to 1000"),
    ({"defaults": {"max_attempts": True}}, "max_attempts must be an integer"),
    ({"types": {"email": {"lease": "soon"}}}, "not a duration"),
    ({"types": {"email": {"lease": "0s"}}}, "at least 1s"),
    ({"types": {"bad name!": {}}}, "not a valid name"),
    ({"types": {"email": {"backoff": {"factor": 0.5}}}}, "factor must be a number from 1 to 100"),
    ({"types": {"email": {"backoff": {"jitter": 1.5}}}}, "jitter must be a fraction"),
    ({"types": {"email": {"backoff": {"base": "2h", "cap": "1h"}}}}, "shorter than base"),
    ({"defaults": {"max_attemps": 3}}, "unknown key 'max_attemps'"),
    ({"scheme": "jobkit"}, "unknown key 'scheme'"),
    ({"types": []}, "must be a table"),
])
def test_invalid_values_are_rejected(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_settings(doc)
    assert "\n" not in info.value.message


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "jobkit.toml"
    path.write_text("schema = \n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_settings(path, env={})


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", env={})


def test_url_precedence(tmp_path: Path) -> None:
    path = tmp_path / "jobkit.toml"
    path.write_text('db_url = "postgresql://file"\n')
    env = {"JOBKIT_DB_URL": "postgresql://jobkit", "SUPABASE_DB_URL": "postgresql://supabase",
           "DATABASE_URL": "postgresql://database"}
    assert load_settings(path, db_url="postgresql://flag", env=env).db_url == "postgresql://flag"
    assert load_settings(path, env=env).db_url == "postgresql://jobkit"
    del env["JOBKIT_DB_URL"]
    assert load_settings(path, env=env).db_url == "postgresql://supabase"
    del env["SUPABASE_DB_URL"]
    assert load_settings(path, env=env).db_url == "postgresql://database"
    assert load_settings(path, env={}).db_url == "postgresql://file"


def test_config_from_environment_and_home(tmp_path: Path, sample_config: Path) -> None:
    settings = load_settings(env={"JOBKIT_CONFIG": str(sample_config), "JOBKIT_HOME": str(tmp_path)})
    assert settings.source == sample_config and settings.home == tmp_path
    assert "email" in settings.types


@pytest.mark.parametrize("table", ["defaults", "types.email"])
def test_leases_below_five_seconds_are_refused(table: str) -> None:
    with pytest.raises(ConfigError, match=r"lease must be at least 5s") as error:
        parse_settings(tomllib.loads(f'[{table}]\nlease = "4s"\n'))
    assert "heartbeats" in error.value.hint
    assert parse_settings(tomllib.loads(f'[{table}]\nlease = "5s"\n')) is not None


@pytest.mark.parametrize(("options", "message"), [
    ({"lease": 1}, r"lease must be at least 5s"),
    ({"lease": 0.5}, r"lease must be at least 5s"),
    ({"timeout": 8 * 86400}, r"timeout must be at most 7 days"),
    ({"max_attempts": 0}, r"max_attempts must be from 1 to 1000"),
])
def test_handler_options_out_of_range_are_refused_at_registration(options: dict[str, float], message: str) -> None:
    from jobkit.handlers import Registry

    jobs = Registry()
    with pytest.raises(ConfigError, match=message):
        jobs.handler("t", **options)(lambda payload, ctx: None)  # type: ignore[arg-type]
    assert "t" not in jobs


def test_handler_timeouts_and_leases_past_a_week_are_refused() -> None:
    from datetime import timedelta

    from jobkit.handlers import Registry

    jobs = Registry()
    for options in ({"timeout": timedelta(days=31)}, {"lease": timedelta(days=8)}):
        with pytest.raises(ConfigError, match="at most 7 days"):
            jobs.handler("long", **options)(lambda payload, ctx: None)  # type: ignore[arg-type]


def test_owner_in_a_key_template() -> None:
    """Issue 21 Found 6: a template can name the job's owner; it is stored as {"ref": "owner"}."""
    settings = parse_settings({"types": {"export": {"concurrency_key": "user:{ owner }/{{x}}",
                                                    "max_running_per_key": 1}},
                               "user_api": {"schema": "jobkit_user", "types": ["export"]}})
    template = settings.types["export"].concurrency_key
    assert template is not None and not template.names_payload
    assert template.as_json() == ["user:", {"ref": "owner"}, "/{x}"]
    assert template.render({"owner": "payload's"}, "auth0|42") == "user:auth0|42/{x}"
    assert template.render({}) == "user:/{x}"  # a job without an owner


@pytest.mark.parametrize("template", ["tenant:{payload.tenant_id}", "{owner}:{payload.x}"])
def test_a_user_api_type_cannot_key_by_the_payload(template: str) -> None:
    """Issue 21 Found 6: end users write the payload, so a [user_api] type's key may not name it."""
    doc = {"types": {"export": {"concurrency_key": template}},
           "user_api": {"schema": "jobkit_user", "types": ["export"]}}
    with pytest.raises(ConfigError, match=r"\[types.export\] concurrency_key .* names payload fields") as refused:
        parse_settings(doc)
    assert "{owner}" in refused.value.hint
    del doc["user_api"]
    assert parse_settings(doc).types["export"].concurrency_key is not None  # fine for backend-only types


def test_a_key_template_longer_than_a_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="over 1000 characters of text"):
        parse_settings({"types": {"export": {"concurrency_key": "k" * 1001 + "{owner}"}}})
    assert parse_settings({"types": {"export": {"concurrency_key": "k" * 1000}}}).types["export"].fair
MAINTENANCE_OFF = {name: "off" for name in ("wake", "sweep-stuck", "sweep-dead", "prune", "prune-cron-history")}


@pytest.mark.parametrize(("doc", "db_url", "longest", "room"), [
    ({"schema": "s" * 40}, None, "jobkit:?." + "s" * 40 + ":prune-cron-history", 35),
    ({"schema": "s" * 30}, "postgresql://u@h/postgres", "jobkit:postgres." + "s" * 30 + ":prune-cron-history", 28),
    ({"schedules": {"n" * 40: {"cron": "0 3 * * *", "type": "t"}}, "schema": "s" * 20}, None,
     "jobkit:?." + "s" * 20 + ":" + "n" * 40, 13),
    ({"schema": "s" * 59, "maintenance": MAINTENANCE_OFF}, None, "s" * 59 + "_wake", 58),
])
def test_the_longest_derived_name_is_measured(doc: dict[str, object], db_url: str | None, longest: str,
                                              room: int) -> None:
    """Issue 21 (Found 18): validation measures the names names.py derives (the ones deploy, the
    worker and jobkit.wait use), not a fixed schema length, and names the longest schema that fits."""
    from jobkit.names import MAX_NAME_BYTES

    with pytest.raises(ConfigError) as info:
        parse_settings({**doc, **({"db_url": db_url} if db_url else {})})
    assert f"{longest!r}" in info.value.message and f"{len(longest)} bytes" in info.value.message
    assert f"at most {room} characters" in info.value.hint
    fits = {**doc, "schema": "s" * room, **({"db_url": db_url} if db_url else {})}
    assert parse_settings(fits).schema == "s" * room
    assert len(longest) - len(str(doc["schema"])) + room == MAX_NAME_BYTES


def test_cron_job_names_are_derived_in_one_place() -> None:
    from jobkit.names import cron_prefix

    assert cron_prefix("postgres", "postgres", "jobkit") == "jobkit:"
    assert cron_prefix("app", "postgres", "jobkit") == "jobkit:app.jobkit:"
    assert cron_prefix("postgres", "postgres", "jobs") == "jobkit:postgres.jobs:"


def test_run_at_must_be_a_datetime() -> None:
    from jobkit.enqueue import new_job

    with pytest.raises(ConfigError, match="run_at must be a datetime"):
        new_job("t", {}, run_at="2026-01-01")  # type: ignore[arg-type]


def test_run_at_ends_before_the_last_day_of_9999() -> None:
    from datetime import UTC, datetime, timezone

    from jobkit.enqueue import new_job

    assert new_job("t", {}, run_at=datetime(9999, 12, 30, 23, 59, tzinfo=UTC)).run_at is not None
    west = timezone(timedelta(hours=-1))
    for late in (datetime(9999, 12, 31, tzinfo=UTC), datetime(9999, 12, 30, 23, 30, tzinfo=west),
                 datetime(9999, 12, 31), datetime.max):
        with pytest.raises(ConfigError, match="too far ahead"):
            new_job("t", {}, run_at=late)


def test_dashboard_indexes_are_off_unless_asked_for() -> None:
    """[dashboard] payload_index and created_index (issue 23): both opt-in, booleans only."""
    plain = parse_settings({})
    assert (plain.payload_index, plain.created_index) == (False, False)
    both = parse_settings({"dashboard": {"payload_index": True, "created_index": True}})
    assert (both.payload_index, both.created_index) == (True, True)
    with pytest.raises(ConfigError, match=r"\[dashboard\] created_index must be true or false") as info:
        parse_settings({"dashboard": {"created_index": "yes"}})
    assert "created_index = true builds" in (info.value.hint or "")
