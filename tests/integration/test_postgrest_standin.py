"""The PostgREST RPC TEST STAND-IN (tests/standins/postgrest.py) answers like Supabase's Data API: through
raw HTTP and through the real supabase-py client, against jobkit's real functions as service_role."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from postgrest import APIError, SyncPostgrestClient
from standins.postgrest import create_app, http_status, serve

from supabase import Client, ClientOptions, create_client

# JWT-shaped but opaque: the stand-in compares keys, it never decodes or verifies them.
SERVICE_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0.c2lnbmF0dXJl"
ANON_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoiYW5vbiJ9.c2lnbmF0dXJl"
JOBKIT = {"Content-Profile": "jobkit"}
OPTIONS = ClientOptions(auto_refresh_token=False, persist_session=False)
# supabase-py 2.34 warns about its own internal use of these postgrest-py parameters.
pytestmark = pytest.mark.filterwarnings("ignore:The '(timeout|verify)' parameter is deprecated")


@pytest.fixture
def base_url(db_url: str) -> Iterator[str]:
    app = create_app(db_url, service_key=SERVICE_KEY, anon_key=ANON_KEY, exposed_schemas=["public", "jobkit"])
    with serve(app) as url:
        yield url


@pytest.fixture
def api(base_url: str) -> Iterator[httpx.Client]:
    """Raw HTTP as service_role, the way supabase-py sends it."""
    headers = {"apikey": SERVICE_KEY, "Authorization": f"Bearer {SERVICE_KEY}"}
    with httpx.Client(base_url=f"{base_url}/rest/v1", headers=headers, timeout=10) as client:
        yield client


@pytest.fixture
def sb(base_url: str) -> Client:
    return create_client(base_url, SERVICE_KEY, options=OPTIONS)


def sql(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else []


def enqueue(api: httpx.Client, **extra: Any) -> str:
    response = api.post("/rpc/enqueue", json={"p_type": "email", "p_payload": {"to": "a@b.c"}, **extra},
                        headers=JOBKIT)
    assert response.status_code == 200, response.text
    return str(response.json())


def pick(api: httpx.Client, limit: int = 10) -> list[dict[str, Any]]:
    response = api.post("/rpc/pick_jobs", headers=JOBKIT,
                        json={"p_type": "email", "p_limit": limit, "p_worker": "w1", "p_lease": "30 seconds"})
    assert response.status_code == 200, response.text
    jobs: list[dict[str, Any]] = response.json()
    return jobs


def test_scalar_set_and_array_arguments_over_http(api: httpx.Client, db_url: str) -> None:
    first = enqueue(api)
    assert uuid.UUID(first)
    urgent = {"p_type": "email", "p_payload": {}, "p_priority": 5, "p_run_at": "2020-01-01T00:00:00Z"}
    assert api.post("/rpc/enqueue", headers=JOBKIT, json=urgent).status_code == 200
    jobs = pick(api)
    assert len(jobs) == 2 and {j["status"] for j in jobs} == {"processing"}
    assert jobs[0]["priority"] == 5 and jobs[1]["id"] == first and jobs[1]["payload"] == {"to": "a@b.c"}
    assert jobs[0]["worker_id"] == "w1" and jobs[0]["attempts"] == 1
    assert pick(api) == []  # each call is its own committed transaction: the claims persisted

    done = api.post("/rpc/complete_jobs", headers=JOBKIT, json={
        "p_ids": [jobs[1]["id"]], "p_attempts": [1], "p_results": [{"sent": True}]})
    assert done.status_code == 200 and done.json() == [first]  # setof uuid -> an array of strings
    assert done.headers["content-type"] == "application/json; charset=utf-8"
    assert done.headers["content-range"] == "0-0/*"
    failure = {"p_id": jobs[0]["id"], "p_attempt": 1, "p_error": "smtp down", "p_retry_in": "1 hour"}
    failed = api.post("/rpc/fail_job", headers=JOBKIT, json=failure)
    assert failed.status_code == 200 and failed.json() == "pending"
    assert sql(db_url, "select status, result, last_error, scheduled_for > now() + interval '59 minutes'"
                       " from jobkit.jobs order by priority") == [
        ("completed", {"sent": True}, None, False), ("pending", None, "smtp down", True)]
    # Scalars come back as bare JSON values: true, false, null.
    assert api.post("/rpc/cancel_job", headers=JOBKIT, json={"p_id": jobs[0]["id"]}).json() is True
    assert api.post("/rpc/cancel_job", headers=JOBKIT, json={"p_id": jobs[0]["id"]}).json() is False
    lease = api.post("/rpc/extend_lease", headers=JOBKIT,
                     json={"p_id": str(uuid.uuid4()), "p_attempt": 1, "p_by": "1 minute"})
    assert lease.status_code == 200 and lease.text == "null"


def test_table_functions_null_array_elements_and_composites(api: httpx.Client, db_url: str) -> None:
    ids = [enqueue(api, p_max_attempts=1), enqueue(api, p_idempotency_key="k")]
    assert enqueue(api, p_idempotency_key="k") == ids[1]
    pick(api)
    response = api.post("/rpc/fail_jobs", headers=JOBKIT, json={
        "p_ids": ids, "p_attempts": [1, 1], "p_errors": ["x", "y"],
        "p_retry_in": [None, "45 seconds"], "p_permanent": [False, None]})
    assert response.status_code == 200  # returns table (id, status) -> an array of objects
    assert sorted(response.json(), key=lambda r: ids.index(r["id"])) == [
        {"id": ids[0], "status": "failed"}, {"id": ids[1], "status": "pending"}]
    # A single composite comes back as an object; GET takes its arguments from the query string.
    settings = api.get("/rpc/type_settings", params={"p_type": "email"}, headers={"Accept-Profile": "jobkit"})
    assert settings.status_code == 200 and settings.json()["max_attempts"] == 3
    assert settings.json()["lease"] == "00:05:00"


def test_sql_errors_are_postgrest_errors(api: httpx.Client, db_url: str) -> None:
    response = api.post("/rpc/enqueue", headers=JOBKIT, json={"p_type": "email", "p_payload": None})
    assert response.status_code == 400
    assert response.json() == {"code": "22023", "details": None, "hint": None,
                               "message": "jobkit.enqueue: p_payload must not be null (use '{}'::jsonb)"}
    bad = api.post("/rpc/fail_job", headers=JOBKIT,
                   json={"p_id": "not-a-uuid", "p_attempt": 1, "p_error": "x"})
    assert bad.status_code == 400 and bad.json()["code"] == "22P02"
    # GET runs READ ONLY: a volatile function that writes fails with 25006 -> 405.
    get = api.get("/rpc/enqueue", params={"p_type": "email", "p_payload": "{}"},
                  headers={"Accept-Profile": "jobkit"})
    assert get.status_code == 405 and get.json()["code"] == "25006"
    assert sql(db_url, "select count(*) from jobkit.jobs") == [(0,)]
    # 23505 -> 409 and a void function -> 204, in a schema of our own making.
    sql(db_url, "create table public.t (x int primary key); grant all on public.t to service_role;"
                " create function public.add_x(p_x int) returns void language sql"
                " as 'insert into public.t values (p_x)'")
    assert api.post("/rpc/add_x", json={"p_x": 1}).status_code == 204
    again = api.post("/rpc/add_x", json={"p_x": 1})
    assert again.status_code == 409 and again.json()["code"] == "23505"
    assert again.json()["details"] == "Key (x)=(1) already exists."


def test_permissions_keys_and_schemas(api: httpx.Client, base_url: str, db_url: str) -> None:
    args = {"p_type": "email", "p_payload": {}}
    with httpx.Client(base_url=f"{base_url}/rest/v1", timeout=10) as raw:
        anon = raw.post("/rpc/enqueue", json=args, headers={**JOBKIT, "apikey": ANON_KEY,
                                                              "Authorization": f"Bearer {ANON_KEY}"})
        assert anon.status_code == 401 and anon.headers["www-authenticate"] == "Bearer"
        assert anon.json()["code"] == "42501" and "permission denied" in anon.json()["message"]
        wrong = raw.post("/rpc/enqueue", json=args, headers={**JOBKIT, "apikey": "nope",
                                                               "Authorization": f"Bearer {SERVICE_KEY}"})
        assert wrong.status_code == 401 and wrong.json()["message"] == "Invalid API key"
        missing = raw.post("/rpc/enqueue", json=args, headers=JOBKIT)
        assert missing.status_code == 401 and missing.json()["message"] == "No API key found in request"
        for auth in ({}, {"Authorization": "Bearer someone-else"}, {"Authorization": SERVICE_KEY}):
            response = raw.post("/rpc/enqueue", json=args, headers={**JOBKIT, "apikey": SERVICE_KEY, **auth})
            assert response.status_code == 401, auth
    assert sql(db_url, "select count(*) from jobkit.jobs") == [(0,)]
    # 42501 as an authenticated role (service_role) is 403.
    sql(db_url, "create function public.locked() returns int language sql as 'select 1';"
                " revoke execute on function public.locked() from public")
    locked = api.post("/rpc/locked", json={})
    assert locked.status_code == 403 and locked.json()["code"] == "42501"

    for method, header in (("POST", "Content-Profile"), ("GET", "Accept-Profile")):
        response = api.request(method, "/rpc/enqueue", json=args if method == "POST" else None,
                               headers={header: "cron"})
        assert response.status_code == 406 and response.json() == {
            "code": "PGRST106", "details": None, "message": "Invalid schema: cron",
            "hint": "Only the following schemas are exposed: public, jobkit"}


def test_unknown_functions_and_argument_sets_are_404(api: httpx.Client) -> None:
    nope = api.post("/rpc/nope", headers=JOBKIT, json={"p_b": 1, "p_a": 2})
    assert nope.status_code == 404 and nope.json() == {
        "code": "PGRST202", "hint": None,
        "message": "Could not find the function jobkit.nope(p_a, p_b) in the schema cache",
        "details": "Searched for the function jobkit.nope with parameters p_a, p_b or with a single unnamed"
                   " json/jsonb parameter, but no matches were found in the schema cache."}
    typo = api.post("/rpc/enqueu", headers=JOBKIT, json={})
    assert typo.status_code == 404
    assert typo.json()["hint"] == "Perhaps you meant to call the function jobkit.enqueue"
    assert "jobkit.enqueu without parameters" in typo.json()["details"]
    missing = api.post("/rpc/enqueue", headers=JOBKIT, json={"p_type": "email"})  # p_payload is required
    assert missing.status_code == 404 and missing.json()["code"] == "PGRST202"
    extra = api.post("/rpc/enqueue", headers=JOBKIT, json={"p_type": "email", "p_payload": {}, "p_x": 1})
    assert extra.status_code == 404
    default = api.post("/rpc/enqueue", json={"p_type": "email", "p_payload": {}})  # first exposed: public
    assert default.status_code == 404 and "public.enqueue(p_payload, p_type)" in default.json()["message"]


def call(client: Client | SyncPostgrestClient, fn: str, params: dict[str, Any], get: bool = False) -> Any:
    """``client.rpc(fn, params).execute().data`` (postgrest-py types params as dict[str, str])."""
    return client.rpc(fn, params, get=get).execute().data


def test_supabase_py_client(sb: Client, base_url: str, db_url: str) -> None:
    jobkit = sb.schema("jobkit")
    job_id = call(jobkit, "enqueue", {"p_type": "email", "p_payload": {"n": 1}})
    assert isinstance(job_id, str) and uuid.UUID(job_id)
    claim = {"p_type": "email", "p_limit": 5, "p_worker": "py", "p_lease": "1 minute"}
    assert [(j["id"], j["status"]) for j in call(jobkit, "pick_jobs", claim)] == [(job_id, "processing")]
    assert call(jobkit, "pick_jobs", claim) == []
    done = call(jobkit, "complete_jobs", {"p_ids": [job_id], "p_attempts": [1], "p_results": [{"ok": 1}]})
    assert done == [job_id]
    assert call(jobkit, "type_settings", {"p_type": "email"}, get=True)["type"] == "*"

    with pytest.raises(APIError) as error:
        call(jobkit, "enqueue", {"p_type": "email", "p_payload": None})
    assert error.value.code == "22023" and "p_payload must not be null" in (error.value.message or "")
    with pytest.raises(APIError) as error:
        call(jobkit, "fail_job", {"p_id": job_id, "p_attempt": 1, "p_error": "late", "p_x": 1})
    assert error.value.code == "PGRST202"
    with pytest.raises(APIError) as error:
        call(sb.schema("private"), "enqueue", {})
    assert error.value.code == "PGRST106"
    anon = create_client(base_url, ANON_KEY, options=OPTIONS)
    with pytest.raises(APIError) as error:
        call(anon.schema("jobkit"), "enqueue", {"p_type": "email", "p_payload": {}})
    assert error.value.code == "42501"
    assert sql(db_url, "select count(*) from jobkit.jobs") == [(1,)]

    # GET sends a list as a Postgres array literal; json_to_record reads it with the array's input function.
    sql(db_url, "create function public.count_ids(p_ids uuid[]) returns int stable language sql"
                " as 'select cardinality(p_ids)'")
    assert call(sb, "count_ids", {"p_ids": [job_id, job_id]}, get=True) == 2
    assert call(sb, "count_ids", {"p_ids": [job_id]}) == 1


def test_status_mapping_matches_postgrest() -> None:
    cases = {("23505", True): 409, ("23503", True): 409, ("P0001", True): 400, ("22023", True): 400,
             ("42501", True): 403, ("42501", False): 401, ("25006", True): 405, ("42883", True): 404,
             ("40001", True): 500, ("57014", True): 500, ("53300", True): 503, ("P0002", True): 500,
             ("PT418", True): 418, ("XX000", True): 500, ("0P000", True): 403, ("22P02", True): 400}
    assert {case: http_status(case[0], "", case[1]) for case in cases} == cases
    assert http_status("21000", "UPDATE requires a WHERE clause", True) == 400
    assert http_status("22023", 'role "x" does not exist', True) == 401
