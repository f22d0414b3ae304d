"""The dashboard's words for times, counts, filters and the database it reads (issue 27): plain
functions, fed anything (outside input is data, never a crash)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from jobkit.dashboard.data import Total
from jobkit.dashboard.look import ago, project_name, utc
from jobkit.ops.selection import FIELDS, JobFilter

NOW = datetime(2026, 12, 6, 14, 0, tzinfo=UTC)


def test_ago_words() -> None:
    assert ago(NOW - timedelta(seconds=12), NOW) == "12 s ago"
    assert ago(NOW - timedelta(minutes=3, seconds=5), NOW) == "3 min ago"
    assert ago(NOW + timedelta(minutes=4, seconds=30), NOW) == "in 4 min"
    assert ago(NOW - timedelta(days=2, hours=1), NOW) == "2 d ago"
    assert ago(NOW, NOW) == "now" and ago(None) == "-"
    assert utc(datetime(2026, 12, 6, 15, 3, 12, 123456, tzinfo=UTC)) == "2026-12-06 15:03:12.123 UTC"


def test_project_names() -> None:
    assert project_name("postgresql://postgres:pw@db.abcdefghijklmnop.supabase.co:5432/postgres") == \
        "Supabase abcdefghijklmnop"
    assert project_name("postgresql://postgres.abcdefghij:pw@aws-0-eu-central-1.pooler.supabase.com:6543/postgres") \
        == "Supabase abcdefghij"
    assert project_name("postgresql://app:secret@db.internal:5432/orders") == "orders on db.internal"
    assert project_name("postgresql:///jobs?host=/var/run/postgresql") == "jobs"
    assert "secret" not in project_name("postgresql://app:secret@h/d")


def test_totals_say_what_they_are() -> None:
    assert (Total(1204, True).text, Total(1204, True).how) == ("1,204", "exact count")
    assert Total(1_234_567, False).text == "≈ 1.2M" and "estimate" in Total(1_234_567, False).how
    assert Total(35_000, False).text == "≈ 35k"
    assert Total(None, False).text == "10,000+" and "no statistics" in Total(None, False).how


def test_filter_in_words() -> None:
    assert JobFilter().describe() == "every job (no filter)"
    flt = JobFilter.parse({"type": "send_email", "status": "dead", "error": "refused"})
    assert flt.describe() == "type is send_email and status is dead and last error contains 'refused'"
    assert JobFilter.parse({"status": "waiting"}).describe() == "status is waiting"  # 0018's states filter too


@given(st.text(max_size=300))
def test_any_url_gives_a_name(url: str) -> None:
    assert isinstance(project_name(url), str)


@given(st.dictionaries(st.sampled_from([f for f in FIELDS if f not in ("status", "since", "until", "payload")]),
                       st.text(max_size=50).filter(lambda s: "\x00" not in s)))
def test_any_filter_in_words(values: dict[str, str]) -> None:
    text = JobFilter.parse(values).describe()
    assert isinstance(text, str) and text


@given(st.datetimes(timezones=st.just(UTC)))
def test_any_time_in_words(value: datetime) -> None:
    assert ago(value, NOW) and utc(value).endswith(" UTC")
