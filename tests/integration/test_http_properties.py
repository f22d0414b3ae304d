"""No input gives a 500 (issue 21, build 5): hypothesis over every HTTP surface of the worker and the
dashboard, against the real apps on a real database. Every response is a 2xx, 3xx or 4xx, and
nothing is logged at ERROR or with a traceback.

Fixed seed (derandomize) and bounded examples: the whole module runs in well under a minute. The
in-process TestClient re-encodes non-ASCII header bytes as UTF-8; test_serving.py sends raw bytes
over a socket for the cases that matter."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import jwt
import pytest
from dashboard_seed import hold_state_changing_schedules, seed
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.dashboard import AuthConfig, Dashboard
from jobkit.handlers import Registry
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.signing import HEADER, sign
from starlette.testclient import TestClient

SECRET = "properties-secret-0123456789abcdef01234567"
TOKEN = "properties-dashboard-token-0123"
JWT_SECRET = "properties-jwt-secret-0123456789abcdef0123"


def bounded(examples: int) -> Any:
    return settings(derandomize=True, max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


HOSTILE = st.sampled_from([
    "", " ", "²", "١٢", "9" * 5000, "-1", "1e309", "NaN", "Infinity", "null", "[]", "{}", "\x00", "a\x00b",
    "[" * 3000, "[" * 1500 + "]" * 1500, '{"a": ' + "1" * 5000 + "}", '{"a": 1e999}', '{"a": "\\u0000"}',
    '{"a": "\\ud800"}', '{"a": NaN}', "../../../etc/passwd", "%2e%2e%2f", "//evil.example", "\\\\evil",
    "😀" * 50, "é" * 300, "x" * 10_000, "2026-13-45T99:99", "0001-01-01T00:00-23:59",
    "9999-12-31T23:59:59+14:00", "2026-12-03T09:00|not-a-uuid",
    "2026-12-03T09:00:00+00:00|" + str(uuid.UUID(int=0)), "a.b.c.d", "1.99999999999.YQ.x",
])
TEXT = st.one_of(HOSTILE, HOSTILE, st.text(st.characters(exclude_categories=["Cs"]), max_size=30))
SIGNATURE_LIKE = st.builds(
    "t={},v1={}".format,
    st.one_of(st.from_regex(r"\A[0-9]{1,12}\Z"), st.sampled_from(["²", "9" * 5000, "", "-1", " 1", "1e9"])),
    st.one_of(st.from_regex(r"\A[0-9a-f]{64}\Z"), st.sampled_from(["", "é" * 64, "z" * 64])))
HEADER_TEXT = st.one_of(
    SIGNATURE_LIKE, SIGNATURE_LIKE,
    st.sampled_from(["²", "é" * 10, "9" * 5000, "Bearer ", "Bearer " + "x" * 5000, "null", "http://[::1",
                     "http://a:99999", "https://127.0.0.1", "http://127.0.0.1:0", "x" * 10_000]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40))


def as_header(value: str) -> bytes:
    return value.encode("utf-8")


def no_server_error(response: Any, caplog: pytest.LogCaptureFixture, what: Any) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, (str(what)[:500], [r.getMessage()[:300] for r in bad])


# ---- the worker ---------------------------------------------------------------------------------

jobs = Registry()


@jobs.handler("echo")
async def echo(payload: Any, ctx: Any) -> Any:
    return payload


RUN_FIELD = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), TEXT,
                      st.lists(st.integers(), max_size=2), st.dictionaries(TEXT, st.integers(), max_size=2),
                      st.sampled_from(["echo", "nope"]), st.integers(1, 1000))
RUN_BODY = st.dictionaries(st.sampled_from(["type", "max_jobs", "budget_ms", "nonce", "at", "colour"]),
                           RUN_FIELD, max_size=5)
RAW_BODY = st.one_of(st.binary(max_size=200), st.sampled_from(
    [b"[" * 5000, b'{"type": "echo", "max_jobs": ' + b"9" * 5000 + b"}", b"\xff\xfe", b"null", b"",
     b'{"type": "echo", "at": 1e999}', b'{"type": "echo", "budget_ms": NaN}']))


@pytest.fixture
def worker(db_url: str, caplog: pytest.LogCaptureFixture) -> Iterator[TestClient]:
    caplog.set_level(logging.WARNING)
    endpoint = WorkerEndpoint(jobs, PostgresBackend(db_url), EndpointOptions(secret=SECRET, linger=0.0))
    with TestClient(endpoint.app, raise_server_exceptions=False) as client:
        yield client
        time.sleep(0.3)  # background drains of what was accepted end (and would log a failure)
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage()[:300] for r in bad]


@bounded(200)
@example(path="/run", body=b'{"type": "echo"}', how="random", header="t=" + "9" * 5000 + ",v1=" + "a" * 64,
         content_type=None)  # found 5 (the worker's part)
@example(path="/run", body=b'{"type": "echo"}', how="random", header="t=²,v1=" + "a" * 64, content_type=None)
@example(path="/run?wait=1", body=b'{"type": "a\\u0000b"}', how="signed", header="", content_type=None)
@given(path=st.sampled_from(["/run", "/run", "/run?wait=1"]),
       body=st.one_of(RUN_BODY.map(lambda b: json.dumps({"nonce": uuid.uuid4().hex, **b}).encode()), RAW_BODY),
       how=st.sampled_from(["signed", "signed", "old", "future", "random", "random", "random", "none"]),
       header=HEADER_TEXT, content_type=st.one_of(st.none(), HEADER_TEXT))
def test_run_answers_any_signature_and_body_with_a_4xx_at_worst(
        worker: TestClient, caplog: pytest.LogCaptureFixture, path: str, body: bytes, how: str,
        header: str, content_type: str | None) -> None:
    headers: dict[str, bytes] = {}
    if how in ("signed", "old", "future"):
        shift = {"signed": 0, "old": -3600, "future": 3600}[how]
        headers[HEADER] = sign(SECRET, body, int(time.time()) + shift).encode()
    elif how == "random":
        headers[HEADER] = as_header(header)
    if content_type is not None:
        headers["content-type"] = as_header(content_type)
    response = worker.post(path, content=body, headers=headers)
    no_server_error(response, caplog, (path, body, headers))


@bounded(80)
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
       path=st.one_of(st.sampled_from(["/healthz", "/metrics", "/run", "/", "/run/x"]),
                      TEXT.map(lambda t: "/" + quote(t))),
       authorization=st.one_of(st.none(), HEADER_TEXT), body=RAW_BODY)
def test_every_worker_route_answers_anything_with_a_4xx_at_worst(
        worker: TestClient, caplog: pytest.LogCaptureFixture, method: str, path: str,
        authorization: str | None, body: bytes) -> None:
    headers = {} if authorization is None else {"authorization": as_header(authorization)}
    response = worker.request(method, path, content=body, headers=headers)
    no_server_error(response, caplog, (method, path, headers, body))


# ---- the dashboard --------------------------------------------------------------------------------

PARAMS = ["window", "type", "status", "since", "until", "worker", "error", "payload", "cursor", "next",
          "verb", "scope", "matched", "key", "active", "name", "x"]
GET_PAGES = ["/", "/fragments/overview", "/jobs", "/actions", "/schedules", "/ratelimits", "/login", "/workers",
             "/fragments/workers"]
POST_PAGES = ["/actions/confirm", "/actions/run", "/schedules/active", "/types/active", "/login", "/logout"]
SEGMENT = st.one_of(TEXT, st.integers(-10, 10**30).map(str), st.uuids().map(str))
PATH_WITH_SEGMENT = st.builds(lambda pattern, t: pattern.format(quote(t, safe="")),
                              st.sampled_from(["/jobs/{}", "/actions/{}", "/actions/{}/progress", "/static/{}",
                                               "/{}", "/static/../{}"]), SEGMENT)


@pytest.fixture
def dashboards(db_url: str, caplog: pytest.LogCaptureFixture) -> Iterator[dict[str, Any]]:
    """Three dashboards on one seeded database (no auth, a token, a Supabase JWT), their clients,
    a CSRF token of the open one and a session cookie of the token one."""
    import re

    caplog.set_level(logging.WARNING)
    deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(), echo=lambda _m: None)
    hold_state_changing_schedules(db_url)
    seed(db_url, per_state=3)
    made = {"open": Dashboard(db_url, Settings(db_url=db_url)),
            "token": Dashboard(db_url, Settings(db_url=db_url), auth=AuthConfig(token=TOKEN)),
            "jwt": Dashboard(db_url, Settings(db_url=db_url),
                             auth=AuthConfig(jwt_secret=JWT_SECRET, jwt_claim="app_metadata.jobkit=admin"))}
    clients = {name: TestClient(d.app, base_url="http://127.0.0.1", follow_redirects=False,
                                raise_server_exceptions=False) for name, d in made.items()}
    for client in clients.values():
        client.__enter__()
    page = clients["open"].get("/jobs", headers={"accept": "text/html"}).text
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', page)
    cookie = clients["token"].post("/login", data={"credential": TOKEN}).cookies.get("jobkit_dashboard", "")
    clients["token"].cookies.clear()
    with Database(db_url).session() as s:
        ids = [str(r["id"]) for r in s.all("select id from jobkit.jobs order by id limit 20")]
    try:
        yield {"clients": clients, "csrf": csrf.group(1) if csrf else "", "cookie": cookie, "ids": ids}
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)
        for dashboard in made.values():
            dashboard.close()  # waits for the actions the examples started
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage()[:300] for r in bad]


VALID_QUERY = {"window": "1d", "type": "send_email", "status": "dead", "since": "2026-01-01T00:00",
               "until": "2099-01-01", "worker": "w", "error": "refused", "payload": '{"user_id": 3}',
               "next": "/jobs"}


@bounded(150)
@example(which="open", path="/jobs", valid=[], hostile={"payload": "[" * 3000})  # found 5
@example(which="open", path="/jobs", valid=["type"], hostile={"payload": '{"a": ' + "1" * 5000 + "}"})
@example(which="token", path="/jobs", valid=[], hostile={"type": "a\x00b"})
@given(which=st.sampled_from(["open", "token"]), path=st.sampled_from(GET_PAGES),
       valid=st.lists(st.sampled_from(sorted(VALID_QUERY)), max_size=3),
       hostile=st.dictionaries(st.sampled_from(PARAMS), TEXT, min_size=1, max_size=2))
def test_every_query_parameter_of_every_page(dashboards: dict[str, Any], caplog: pytest.LogCaptureFixture,
                                             which: str, path: str, valid: list[str],
                                             hostile: dict[str, str]) -> None:
    """Valid parameters with one or two hostile ones among them, so each reaches its parser."""
    params = {**{k: VALID_QUERY[k] for k in valid}, **hostile}
    headers = {"accept": "text/html", "authorization": f"Bearer {TOKEN}"}
    response = dashboards["clients"][which].get(path, params=params, headers=headers)
    no_server_error(response, caplog, (which, path, params))


@bounded(80)
@example(path="/actions/" + "9" * 5000, html=True)
@example(path="/actions/" + "9" * 5000 + "/progress", html=False)
@given(path=PATH_WITH_SEGMENT, html=st.booleans())
def test_every_path_parameter(dashboards: dict[str, Any], caplog: pytest.LogCaptureFixture,
                              path: str, html: bool) -> None:
    response = dashboards["clients"]["open"].get(path, headers={"accept": "text/html"} if html else {})
    no_server_error(response, caplog, path)


VALID_FORMS: list[tuple[str, dict[str, Any]]] = [
    ("/actions/confirm", {"verb": "retry", "scope": "filter", "type": "send_email", "status": "dead"}),
    ("/actions/run", {"verb": "retry", "scope": "filter", "status": "dead", "matched": "3"}),
    ("/actions/confirm", {"verb": "cancel", "scope": "ids", "ids": 2}),
    ("/actions/run", {"verb": "delete", "scope": "ids", "ids": 1, "matched": "1"}),
    ("/schedules/active", {"name": "sweep-dead", "active": "false"}),
    ("/types/active", {"type": "send_email", "key": "k", "active": "true"}),
    ("/login", {"credential": TOKEN, "next": "/jobs"}),
    ("/logout", {}),
]
FORM_KEYS = sorted({*PARAMS, "ids", "credential", "csrf"})


@bounded(200)
@example(which=1, hostile={"matched": ["²"]}, where="form", multipart=False)  # found 5
@example(which=1, hostile={"matched": ["9" * 5000]}, where="form", multipart=False)  # found 5
@example(which=0, hostile={"payload": ["[" * 3000]}, where="form", multipart=True)
@example(which=4, hostile={"csrf": ["é"]}, where="form", multipart=False)
@given(which=st.integers(0, len(VALID_FORMS) - 1),
       hostile=st.dictionaries(st.sampled_from(FORM_KEYS), st.lists(TEXT, min_size=1, max_size=2),
                               min_size=1, max_size=2),
       where=st.sampled_from(["form", "form", "header"]), multipart=st.booleans())
def test_every_form_field_of_every_action(dashboards: dict[str, Any], caplog: pytest.LogCaptureFixture,
                                          which: int, hostile: dict[str, list[str]], where: str,
                                          multipart: bool) -> None:
    """A valid form (valid CSRF token included) with one or two fields made hostile, so that each
    field reaches the code that reads it."""
    path, valid = VALID_FORMS[which]
    fields: dict[str, list[str]] = {k: [v] for k, v in valid.items() if k != "ids"}
    if "ids" in valid:
        fields["ids"] = dashboards["ids"][:valid["ids"]]
    headers = {"x-csrf-token": dashboards["csrf"]} if where == "header" else {}
    if where == "form":
        fields["csrf"] = [dashboards["csrf"]]
    fields.update(hostile)
    client = dashboards["clients"]["open"]
    if multipart:
        files = [(k, (None, v.encode("utf-8"))) for k, vs in fields.items() for v in vs]
        response = client.post(path, files=files, headers=headers)
    else:
        response = client.post(path, data=fields, headers=headers)
    no_server_error(response, caplog, (path, fields, headers))


def jwts() -> st.SearchStrategy[str]:
    claims = st.dictionaries(st.sampled_from(["exp", "role", "sub", "email", "app_metadata"]),
                             st.one_of(st.integers(-(2**70), 2**70), st.floats(), TEXT,
                                       st.dictionaries(st.just("jobkit"), TEXT, max_size=1)), max_size=5)
    secret = st.sampled_from([JWT_SECRET, "another-secret-0123456789abcdef0123456789"])
    signed = st.builds(lambda c, k: jwt.encode(c, k, algorithm="HS256"), claims, secret)
    return st.one_of(signed, st.builds("{}.{}.{}".format, TEXT, TEXT, TEXT))


COOKIE = st.one_of(HEADER_TEXT, st.builds("{}.{}.{}.{}".format, TEXT, TEXT, TEXT, TEXT))


@bounded(150)
@given(which=st.sampled_from(["open", "token", "jwt"]), method=st.sampled_from(["GET", "POST", "PUT"]),
       path=st.one_of(st.sampled_from(GET_PAGES + POST_PAGES), PATH_WITH_SEGMENT),
       authorization=st.one_of(st.none(), st.just(f"Bearer {TOKEN}"), jwts().map("Bearer {}".format),
                               HEADER_TEXT),
       cookie=st.one_of(st.none(), st.just("valid"), COOKIE),
       csrf=st.one_of(st.none(), st.just("valid"), HEADER_TEXT),
       extra=st.dictionaries(st.sampled_from(["origin", "x-forwarded-host", "content-type", "accept",
                                              "content-length", "transfer-encoding"]),
                             st.one_of(HEADER_TEXT, st.sampled_from(
                                 ["http://127.0.0.1", "null", "text/html", "multipart/form-data; boundary=x",
                                  "application/x-www-form-urlencoded", "chunked", "0", "-1", "99999999999"])),
                             max_size=3),
       body=RAW_BODY)
def test_every_credential_header_and_body(dashboards: dict[str, Any], caplog: pytest.LogCaptureFixture,
                                          which: str, method: str, path: str, authorization: str | None,
                                          cookie: str | None, csrf: str | None, extra: dict[str, str],
                                          body: bytes) -> None:
    headers = {k: as_header(v) for k, v in extra.items()}
    if authorization is not None:
        headers["authorization"] = as_header(authorization)
    if cookie is not None:
        headers["cookie"] = as_header("jobkit_dashboard=" + (dashboards["cookie"] if cookie == "valid" else cookie))
    if csrf is not None:
        headers["x-csrf-token"] = as_header(dashboards["csrf"] if csrf == "valid" else csrf)
    response = dashboards["clients"][which].request(method, path, content=body, headers=headers)
    no_server_error(response, caplog, (which, method, path, headers, body))
