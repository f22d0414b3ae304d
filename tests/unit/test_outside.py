"""A migration's outside-transaction section (toolkit/schema/outside.py) and the lock-retry policy
(toolkit/schema/locks.py): parsing, the in-transaction form a fresh install runs, and bad sections
refused with the fix. Whether the database accepts both forms is tests/integration/test_live_deploy.py's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobkit.exceptions import ResourceError
from jobkit.schema.locks import Retry
from jobkit.schema.outside import MARKER, Step, inside, split, transaction_form

MIGRATION = f"""alter table "jobkit".jobs add column tenant text;
{MARKER}
-- a comment line, dropped
create unique index concurrently if not exists "Odd""Name" on "jobkit".jobs (tenant);
drop index concurrently if exists "jobkit".jobs_old_idx;
update "jobkit".jobs set tenant = 'x'
where id in (select id from "jobkit".jobs where tenant is null limit %(batch)s);
"""


def test_split_keeps_the_migration_proper_and_classifies_each_statement() -> None:
    proper, steps = split(MIGRATION)
    assert proper == 'alter table "jobkit".jobs add column tenant text;\n'
    assert [s.kind for s in steps] == ["create_index", "drop_index", "backfill"]
    assert steps[0].index == 'Odd"Name'
    assert inside(MIGRATION) == proper


def test_no_marker_is_all_inside() -> None:
    assert split("create table t (x int);\n") == ("create table t (x int);\n", [])


def test_the_in_transaction_form_drops_concurrently_and_the_batch_limit() -> None:
    _, steps = split(MIGRATION)
    forms = [transaction_form(s) for s in steps]
    assert forms[0] == 'create unique index if not exists "Odd""Name" on "jobkit".jobs (tenant);'
    assert forms[1] == 'drop index if exists "jobkit".jobs_old_idx;'
    assert forms[2].endswith("limit null);") and "%" not in forms[2]


@pytest.mark.parametrize(("section", "says"), [
    ("create index concurrently jobs_x on t (x);", "cannot run outside"),  # not idempotent
    ("create index if not exists jobs_x on t (x);", "cannot run outside"),  # not concurrent
    ("update t set x = 1 where x is null;", "cannot run outside"),  # not batched
    ("update t set x = '%' where id in (select id from t limit %(batch)s);", "besides"),
    ("vacuum t; analyze t;", "inside a line"),
    (f"drop index concurrently if exists t_idx;\n{MARKER}\n", "2 `"),
])
def test_a_bad_section_is_refused_with_the_fix(section: str, says: str) -> None:
    with pytest.raises(ResourceError, match=says) as info:
        split(f"select 1;\n{MARKER}\n{section}\n", "migration 0099_x")
    assert info.value.hint and "\n" not in info.value.message


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*"cdeilnoprstux ;%()\n-_\"", f"\n{MARKER}\n", "concurrently", "index ",
                                 "if not exists ", "create ", "update ", "%(batch)s"]), max_size=40).map("".join))
def test_any_text_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        _, steps = split(f"select 1;\n{MARKER}\n{text}")
    except ResourceError as exc:
        assert exc.hint
        return
    for step in steps:
        assert isinstance(step, Step) and transaction_form(step).endswith(";")


def test_retry_pauses_double_up_to_the_cap_and_the_budget_adds_up() -> None:
    retry = Retry(attempts=5, backoff=timedelta(seconds=1), cap=timedelta(seconds=3))
    assert [retry.pause(n) for n in range(1, 5)] == [1, 2, 3, 3]
    assert retry.budget(timedelta(milliseconds=500)) == 5 * 0.5 + 9
