"""The pg_net and Vault TEST STAND-INS (tests/standins/) behave like the real extensions: pg_net's
signatures, "sent only after commit", its worker's timing (woken at commit, batches, a 1 s pause after
each), response rows and error texts, plus the stand-in's fault mode; Vault's API and privileges."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import psycopg
import pytest
from poll import wait_for
from psycopg import errors
from standins import PG_NET_SQL, WAKE_CHANNEL, PgNetStandIn, install_vault
from standins.http_server import Seen, Server


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


def post_many(url: str, target: str, count: int, timeout_ms: int = 5000) -> list[int]:
    """`count` net.http_post calls in one transaction (one wake-up); their request ids."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "select net.http_post(%s, timeout_milliseconds => %s) from generate_series(1, %s)",
            (target, timeout_ms, count),
        ).fetchall()
    return [row[0] for row in rows]


class Arrivals(list[Seen]):
    """A Server's `seen` list that also logs when each request reached the server."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[float, Seen]] = []

    def append(self, item: Seen) -> None:
        self.log.append((time.monotonic(), item))  # one append: safe across the handler threads
        super().append(item)


def timed(server: Server) -> Arrivals:
    server.seen = arrivals = Arrivals()
    return arrivals


def waves(arrivals: Arrivals, gap: float = 0.5) -> list[list[tuple[float, Seen]]]:
    """The arrivals split wherever the server heard nothing for `gap` s."""
    groups: list[list[tuple[float, Seen]]] = []
    for entry in sorted(arrivals.log, key=lambda e: e[0]):
        if groups and entry[0] - groups[-1][-1][0] < gap:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


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
    wake = one(
        net.url,
        "select pg_get_function_result(p.oid) || ' ' || p.prosecdef::text from pg_proc p"
        " where p.oid = 'net.wake()'::regprocedure",
    )
    assert wake == "void false"  # pg_net's signature; here it NOTIFYs the stand-in's channel
    assert f"pg_notify('{WAKE_CHANNEL}', '')" in PG_NET_SQL.read_text()
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
        with psycopg.connect(net.url, autocommit=True) as other:  # a committed request wakes the worker
            other.execute("select net.http_get(%s)", (server.base + "/ok?marker",))
        assert [s.path for s in server.wait_for(1)] == ["/ok?marker"]  # that pass could not see ours
        conn.commit()
    seen = server.wait_for(2)[1]
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


def test_rolled_back_post_sends_nothing_and_wakes_nothing(net: PgNetStandIn, server: Server) -> None:
    with psycopg.connect(net.url) as conn:
        conn.execute("select net.http_post(%s, timeout_milliseconds => 1000)", (server.base + "/ok",))
        conn.rollback()
    assert net.stats["wakes"] == 0  # NOTIFY, like pg_net's commit callback, fires at commit only
    marker = one(net.url, "select net.http_get(%s)", server.base + "/ok?marker")  # to see a pass
    assert net.response(marker) is not None
    assert [s.path for s in server.seen] == ["/ok?marker"]  # the rolled-back one never queued
    assert net.stats["wakes"] == 1
    assert one(net.url, "select count(*) from net.http_request_queue") == 0
    assert one(net.url, "select count(*) from net._http_response") == 1  # the marker's


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
        # As in pg_net, responses expire when the worker is woken; the stand-in starts idle (the
        # 20 ms polling it used to do expired them without a wake).
        one(fresh_db, "select net.wake()")
        deadline = time.monotonic() + 3
        while one(fresh_db, "select count(*) from net._http_response") != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert one(fresh_db, "select array_agg(id) from net._http_response") == [2]


def test_an_isolated_post_is_sent_at_commit_and_stop_ends_the_pause(
    net: PgNetStandIn, server: Server
) -> None:
    with psycopg.connect(net.url) as conn:
        request_id = conn.execute("select net.http_post(%s)", (server.base + "/ok",)).fetchone()[0]  # type: ignore[index]
        conn.commit()
        committed = time.monotonic()
    response = net.response(request_id, timeout=3)
    assert response is not None and response["status_code"] == 200
    assert time.monotonic() - committed < 0.3
    assert {k: net.stats[k] for k in ("wakes", "batches", "sent")} == {"wakes": 1, "batches": 1, "sent": 1}
    started = time.monotonic()
    net.stop()  # the worker is in its 1 s pause after the batch: stop() does not wait it out
    assert time.monotonic() - started < 0.5


def test_a_burst_gets_a_first_batch_at_once_and_the_rest_after_the_pause(
    net: PgNetStandIn, server: Server
) -> None:
    arrivals = timed(server)
    first_commit = 0.0
    with psycopg.connect(net.url) as conn:
        for i in range(200):  # 200 single-row transactions, each waking the worker at commit
            conn.execute("select net.http_post(%s, %s::jsonb)", (server.base + "/ok", json.dumps({"i": i})))
            conn.commit()
            if i == 0:
                first_commit = time.monotonic()
    assert len(server.wait_for(200, timeout=6)) == 200
    first = min(t for t, _ in arrivals.log)
    early = [t for t, _ in arrivals.log if t < first + 0.5]
    late = [t for t, _ in arrivals.log if t >= first + 0.5]
    assert first - first_commit < 0.3  # the first wake is served at once...
    assert 1 <= len(early) < 200 and late  # ...with what had committed by then
    assert min(late) >= first + 0.7  # the others waited out the pause after that batch
    wait_for(lambda: one(net.url, "select count(*) from net._http_response") == 200, 5,
             "every response recorded", every=0.01)


def test_batch_size_is_respected_with_a_pause_between_batches(fresh_db: str, server: Server) -> None:
    worker = PgNetStandIn(fresh_db, batch_size=10)
    worker.install()
    with worker:
        arrivals = timed(server)
        with psycopg.connect(fresh_db) as conn:
            for i in range(25):
                conn.execute("select net.http_get(%s)", (f"{server.base}/ok?i={i}",))
            conn.commit()  # one wake-up
        assert len(server.wait_for(25, timeout=6)) == 25
    groups = waves(arrivals)
    assert [len(g) for g in groups] == [10, 10, 5]
    assert {seen.path for _, seen in groups[0]} == {f"/ok?i={i}" for i in range(10)}  # in id order
    for before, after in pairwise(group[0][0] for group in groups):
        assert 0.7 <= after - before < 2.0
    assert worker.stats["wakes"] == 1 and worker.stats["batches"] == 3


def test_a_row_inserted_into_the_queue_waits_for_a_wake(net: PgNetStandIn, server: Server) -> None:
    with psycopg.connect(net.url, autocommit=True) as conn:
        conn.execute(
            "insert into net.http_request_queue (method, url, headers, timeout_milliseconds)"
            " values ('GET', %s, '{}', 2000)",
            (server.base + "/ok?direct",),
        )
        assert net.stats["wakes"] == 0  # no net.wake(): not sent, as in pg_net
        conn.execute("select net.http_get(%s)", (server.base + "/ok?woken",))
    seen = server.wait_for(2, timeout=3)
    assert sorted(s.path for s in seen) == ["/ok?direct", "/ok?woken"]
    # both went in the one pass the wake started: the direct row had waited for it
    assert (net.stats["wakes"], net.stats["batches"]) == (1, 1)


def test_drop_mode(fresh_db: str, server: Server) -> None:
    worker = PgNetStandIn(fresh_db, drop_rate=1.0)
    worker.install()
    with worker:
        for request_id in post_many(fresh_db, server.base + "/ok", 3):
            response = worker.response(request_id)
            assert response is not None
            assert (response["status_code"], response["timed_out"]) == (None, False)
            assert response["error_msg"] == "Couldn't connect to server"
    assert server.seen == []
    assert worker.stats["dropped"] == 3 and worker.stats["sent"] == 0


def test_timeout_mode_delivers_but_records_a_timeout(fresh_db: str, server: Server) -> None:
    worker = PgNetStandIn(fresh_db, timeout_rate=1.0)
    worker.install()
    with worker:
        started = time.monotonic()
        for request_id in post_many(fresh_db, server.base + "/ok", 2, timeout_ms=300):
            response = worker.response(request_id)
            assert response is not None
            assert (response["status_code"], response["timed_out"]) == (None, True)
            assert response["error_msg"].startswith("Timeout of 300 ms reached. Total time: ")
        assert time.monotonic() - started >= 0.3  # held in flight until the timeout, as a real one
    assert [s.path for s in server.seen] == ["/ok", "/ok"]
    assert worker.stats["timed_out"] == 2 and worker.stats["sent"] == 0


def test_lose_mode_leaves_no_trace(fresh_db: str, server: Server) -> None:
    worker = PgNetStandIn(fresh_db, lose_rate=1.0)
    worker.install()
    with worker:
        post_many(fresh_db, server.base + "/ok", 3)
        wait_for(lambda: one(fresh_db, "select count(*) from net.http_request_queue") == 0, 5,
                 "the request queue emptied", every=0.01)
    assert server.seen == []
    assert one(fresh_db, "select count(*) from net._http_response") == 0
    assert worker.stats["lost"] == 3 and worker.stats["sent"] == 0


def test_mixed_faults_add_up_and_repeat_with_the_seed(fresh_db: str, server: Server) -> None:
    with pytest.raises(ValueError):
        PgNetStandIn(fresh_db, drop_rate=0.6, lose_rate=0.6)
    PgNetStandIn(fresh_db).install()

    def run() -> dict[str, int]:
        worker = PgNetStandIn(fresh_db, drop_rate=0.2, timeout_rate=0.2, lose_rate=0.2, seed=7)
        with worker:
            post_many(fresh_db, server.base + "/ok", 50, timeout_ms=300)
            wait_for(lambda: one(fresh_db, "select count(*) from net.http_request_queue") == 0, 5,
                 "the request queue emptied", every=0.01)
        return {k: worker.stats[k] for k in ("sent", "dropped", "timed_out", "lost")}

    stats = run()
    assert sum(stats.values()) == 50 and all(stats.values())
    assert len(server.seen) == stats["sent"] + stats["timed_out"]
    counts = one(
        fresh_db,
        "select array[count(*) filter (where status_code = 200), count(*) filter (where timed_out),"
        " count(*) filter (where error_msg = 'Couldn''t connect to server'), count(*)]"
        " from net._http_response",
    )
    assert counts == [stats["sent"], stats["timed_out"], stats["dropped"], 50 - stats["lost"]]
    assert run() == stats  # the same seed, the same fates


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
