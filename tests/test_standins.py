"""The pg_net and Vault TEST STAND-INS (tests/standins/) behave like the real extensions: pg_net's
signatures, "sent only after commit", response rows and error texts; Vault's API and privileges."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from standins import PgNetStandIn, install_vault
from standins.http_server import Server


@pytest.fixture
def net(fresh_db: str) -> Iterator[PgNetStandIn]:
    worker = PgNetStandIn(fresh_db)
    worker.install()
    with worker:
        yield worker


def one(url: str, query: str, *args: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, args).fetchone()
        assert row is not None
        return row[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_signatures_match_pg_net_0_20(net: PgNetStandIn) -> None:
    with psycopg.connect(net.url, autocommit=True) as conn:
        rows = conn.execute(
            "select p.proname, pg_get_function_arguments(p.oid), p.prorettype::regtype::text, p.prosecdef"
            " from pg_proc p where p.pronamespace = 'net'::regnamespace and p.proname like 'http\\___%'"
            " and p.proname <> 'http_collect_response'"
        ).fetchall()
    assert {r[0]: r[1:] for r in rows} == {
        "http_get": (
            "url text, params jsonb DEFAULT '{}'::jsonb, headers jsonb DEFAULT '{}'::jsonb,"
            " timeout_milliseconds integer DEFAULT 5000",
            "bigint",
            False,
        ),
        "http_post": (
            "url text, body jsonb DEFAULT '{}'::jsonb, params jsonb DEFAULT '{}'::jsonb,"
            ' headers jsonb DEFAULT \'{"Content-Type": "application/json"}\'::jsonb,'
            " timeout_milliseconds integer DEFAULT 5000",
            "bigint",
            False,
        ),
        "http_delete": (
            "url text, params jsonb DEFAULT '{}'::jsonb, headers jsonb DEFAULT '{}'::jsonb,"
            " timeout_milliseconds integer DEFAULT 5000, body jsonb DEFAULT NULL::jsonb",
            "bigint",
            False,
        ),
    }
    persistence = one(
        net.url,
        "select string_agg(relname || ':' || relpersistence::text, ',' order by relname) from pg_class"
        " where relnamespace = 'net'::regnamespace and relkind = 'r'",
    )
    assert persistence == "_http_response:u,http_request_queue:u"


def test_committed_post_is_sent_only_after_commit(net: PgNetStandIn, server: Server) -> None:
    with psycopg.connect(net.url) as conn:
        request_id = conn.execute(
            "select net.http_post(%s, body => %s::jsonb, headers => %s::jsonb, timeout_milliseconds => 2000)",
            (server.base + "/ok", '{"job": 7}', '{"Authorization": "Bearer t0k"}'),
        ).fetchone()[0]  # type: ignore[index]
        time.sleep(0.3)  # the worker polls every 20 ms but cannot see the uncommitted row
        assert server.seen == []
        conn.commit()
    [seen] = server.wait_for(1)
    assert (seen.method, seen.path, json.loads(seen.body)) == ("POST", "/ok", {"job": 7})
    assert seen.headers["Content-Type"] == "application/json"  # added by http_post
    assert seen.headers["Authorization"] == "Bearer t0k"
    assert seen.headers["User-Agent"] == "pg_net/0.20.4"
    response = net.response(request_id)
    assert response is not None
    assert response["status_code"] == 200 and response["error_msg"] is None
    assert response["timed_out"] is False
    assert response["content_type"] == "application/json"
    assert response["headers"]["X-Test"] == "yes"
    assert json.loads(response["content"]) == {"path": "/ok"}
    assert one(net.url, "select count(*) from net.http_request_queue") == 0


def test_rolled_back_post_sends_nothing(net: PgNetStandIn, server: Server) -> None:
    with psycopg.connect(net.url) as conn:
        conn.execute("select net.http_post(%s, timeout_milliseconds => 1000)", (server.base + "/ok",))
        conn.rollback()
    time.sleep(0.4)
    assert server.seen == []
    assert one(net.url, "select count(*) from net.http_request_queue") == 0
    assert one(net.url, "select count(*) from net._http_response") == 0


def test_get_params_delete_body_and_redirects(net: PgNetStandIn, server: Server) -> None:
    get_id = one(
        net.url, "select net.http_get(%s, params => %s::jsonb)", server.base + "/ok", '{"q": "a b&c/é"}'
    )
    delete_id = one(net.url, "select net.http_delete(%s, body => '[1]')", server.base + "/ok")
    redirect_id = one(net.url, "select net.http_get(%s)", server.base + "/redirect")
    for request_id in (get_id, delete_id, redirect_id):
        response = net.response(request_id)
        assert response is not None and response["status_code"] == 200
    seen = {(s.method, s.path): s for s in server.wait_for(4)}
    assert ("GET", "/ok?q=a%20b%26c%2F%C3%A9") in seen
    assert seen[("DELETE", "/ok")].body == b"[1]"
    assert ("GET", "/redirect") in seen and ("GET", "/ok") in seen


def test_500_is_a_normal_response_row(net: PgNetStandIn, server: Server) -> None:
    request_id = one(net.url, "select net.http_post(%s, '{}')", server.base + "/fail")
    response = net.response(request_id)
    assert response is not None
    assert (response["status_code"], response["error_msg"], response["timed_out"]) == (500, None, False)


def test_connection_refused_and_unknown_host(net: PgNetStandIn) -> None:
    refused = one(net.url, "select net.http_get(%s)", f"http://127.0.0.1:{closed_port()}/")
    unknown = one(net.url, "select net.http_get('http://no-such-host.invalid/')")
    for request_id, message in (
        (refused, "Couldn't connect to server"),
        (unknown, "Couldn't resolve host name"),
    ):
        response = net.response(request_id)
        assert response is not None
        assert (response["status_code"], response["error_msg"]) == (None, message)
        assert response["timed_out"] is False


def test_timeout_sets_timed_out_although_the_server_got_the_request(
    net: PgNetStandIn, server: Server
) -> None:
    started = time.monotonic()
    request_id = one(net.url, "select net.http_post(%s, timeout_milliseconds => 200)", server.base + "/slow")
    response = net.response(request_id)
    assert response is not None and time.monotonic() - started < 0.9
    assert response["timed_out"] is True and response["status_code"] is None
    assert response["error_msg"].startswith("Timeout of 200 ms reached. Total time: ")
    assert [s.path for s in server.seen] == ["/slow"]


def test_post_rejects_non_json_content_type(net: PgNetStandIn) -> None:
    with pytest.raises(errors.RaiseException, match='Content-Type header must be "application/json"'):
        one(net.url, """select net.http_post('http://x.test', headers => '{"content-type": "text/plain"}')""")


def test_expired_responses_are_deleted(fresh_db: str) -> None:
    worker = PgNetStandIn(fresh_db)
    worker.install()
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(
            "insert into net._http_response (id, status_code, created)"
            " values (1, 200, now() - interval '7 hours'), (2, 200, now())"
        )
    with worker:
        deadline = time.monotonic() + 3
        while one(fresh_db, "select count(*) from net._http_response") != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert one(fresh_db, "select array_agg(id) from net._http_response") == [2]


def test_vault_create_read_update(fresh_db: str) -> None:
    install_vault(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        row = conn.execute("select vault.create_secret('s3cr3t', 'worker_token', 'the token')").fetchone()
        assert row is not None
        secret_id = row[0]
        query = (
            "select name, description, secret, decrypted_secret from vault.decrypted_secrets where id = %s"
        )
        name, description, raw, plain = conn.execute(query, (secret_id,)).fetchone()  # type: ignore[misc]
        assert (name, description, plain) == ("worker_token", "the token", "s3cr3t")
        assert raw != "s3cr3t"
        assert conn.execute("select secret from vault.secrets").fetchone() == (raw,)

        with pytest.raises(errors.UniqueViolation):
            conn.execute("select vault.create_secret('other', 'worker_token')")

        conn.execute("select vault.update_secret(%s, 'n3w')", (secret_id,))
        assert conn.execute(query, (secret_id,)).fetchone()[::3] == ("worker_token", "n3w")  # type: ignore[index]
        conn.execute("select vault.update_secret(%s, new_name => 'renamed')", (secret_id,))
        after = conn.execute(query, (secret_id,)).fetchone()
        assert after is not None and (after[0], after[1], after[3]) == ("renamed", "the token", "n3w")
        assert after[2] not in (raw, "n3w")  # re-"encrypted", never the plain text


def test_vault_privileges(fresh_db: str) -> None:
    install_vault(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege, match="_crypto_aead_det_noncegen"):
            conn.execute("insert into vault.secrets (name, secret) values ('direct', 'x')")
        conn.execute("select vault.create_secret('v', 'k')")
        for role in ("anon", "authenticated"):
            with conn.transaction(force_rollback=True):
                conn.execute(f"set local role {role}")
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute("select decrypted_secret from vault.decrypted_secrets")
        with conn.transaction(force_rollback=True):
            conn.execute("set local role service_role")
            assert conn.execute("select decrypted_secret from vault.decrypted_secrets").fetchall() == [("v",)]
