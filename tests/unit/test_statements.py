"""toolkit/schema/statements.py splits a script where PostgreSQL would, and nowhere else."""

from __future__ import annotations

from jobkit.schema.statements import split


def test_semicolons_inside_quotes_comments_and_bodies_do_not_split() -> None:
    script = """
-- a comment; with a semicolon
create function f() returns text language plpgsql as $body$
begin
    return 'a;b' || $$c;d$$;  -- ;
end
$body$;
select 'it''s; fine', "odd;name" from t /* ; */;

-- trailing comment only
"""
    parts = split(script)
    assert len(parts) == 2
    assert parts[0].startswith("-- a comment; with a semicolon\ncreate function") and parts[0].endswith("$body$;")
    assert parts[1] == "select 'it''s; fine', \"odd;name\" from t /* ; */;"


def test_a_last_statement_without_a_semicolon_is_kept() -> None:
    assert split("select 1; select 2") == ["select 1;", "select 2"]
