"""One named query renders only its own file (toolkit/queries.py): the same text as the full set,
for every name, and a name no file holds is a KeyError."""

from __future__ import annotations

import pytest
from jobkit.queries import Named, _index, jinja_file, queries, query, render_file


@pytest.mark.parametrize("schema", ["jobkit", "My Jobs"])
def test_each_query_alone_is_the_query_of_the_full_set(schema: str) -> None:
    every = queries(schema)
    assert len(every) > 100
    assert {name: query(schema, name) for name in every} == every
    assert Named(schema)["enqueue_many"] == every["enqueue_many"]


def test_an_unknown_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        Named("jobkit")["no_such_query"]


@pytest.mark.parametrize("schema", ["jobkit", "My Jobs", 'odd"name'])
def test_a_file_rendered_without_jinja_is_what_jinja_renders(schema: str) -> None:
    """render_file substitutes the quoted schema in files whose only tag is ``{{ s }}`` (issue 23,
    stop 34); every file, substituted or not, renders as jinja renders it."""
    names = sorted(set(_index().values()))
    assert "jobs.sql" in names
    for name in names:
        assert render_file(schema, name) == jinja_file(schema, name), name
