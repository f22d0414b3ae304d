"""TEST STAND-IN for PostgREST's RPC routes behind Supabase's API gateway (no PostgREST server can be
installed on the test machines). Serves ``POST|GET /rest/v1/rpc/{fn}`` by calling the real function in
the real database, modelled on PostgREST 12-14 (Error.hs, QueryBuilder.hs) and Supabase's gateway:

- ``apikey`` must be the service or anon key (else 401 ``Invalid API key``); the role comes from
  ``Authorization: Bearer <key>``: service key -> ``service_role``, anon key -> ``anon``, missing or other
  -> 401. Keys are opaque strings compared in constant time; no JWT is decoded or verified.
- Schema from ``Content-Profile`` (POST) / ``Accept-Profile`` (GET), default the first exposed one;
  another -> 406 PGRST106.
- The function is looked up in pg_proc by schema, name and the set of argument names (defaults count);
  none -> 404 PGRST202. One connection and one transaction per request: ``SET LOCAL ROLE``, then
  PostgREST's own query shape: the arguments go through ``json_to_record`` (JSON arrays -> Postgres arrays,
  strings read by the type's input function) into ``fn(arg := ...)``. GET, and POST to a STABLE or
  IMMUTABLE function, run READ ONLY (writes -> 25006 -> 405).
- 200 with a JSON array for SETOF/TABLE functions (objects, or scalars for ``setof <scalar>``), the JSON
  value for a scalar, an object for a composite; 204 for void. SQL errors -> ``{"code", "details",
  "hint", "message"}`` with PostgREST's SQLSTATE -> HTTP table (42501: 401 as anon, else 403).

With ``jwt_secret``, a Bearer token that is neither key is read as a signed-in user's JWT (HS256, with
``exp`` and ``role``): its role and all its claims (``request.jwt.claims``) apply. ``GET /rest/v1/<table>``
returns every row the role may read (RLS decides), without filters.

Not modelled: the schema cache (pg_proc is read per request), filters/select/order on results, Prefer
(ignored), single unnamed json/text/bytea parameters, per-role settings (statement_timeout), table
writes.

Usage: ``with serve(create_app(url, service_key=K, anon_key=A, exposed_schemas=["jobkit"])) as base:``
(``base`` is ``http://127.0.0.1:<port>``; supabase-py's ``create_client(base, K)`` appends ``/rest/v1``).
"""

from __future__ import annotations

import difflib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import uvicorn
from psycopg import sql
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

JSON_TYPE = "application/json; charset=utf-8"
_BEARER = {"WWW-Authenticate": "Bearer"}
_RESERVED_QUERY = frozenset({"select", "order", "limit", "offset", "columns", "on_conflict"})
# Per function: setof, volatility, void, composite (as PostgREST decides it), input args in order.
_ROUTINES = """
select p.proretset, p.provolatile, p.prorettype = 'pg_catalog.void'::pg_catalog.regtype,
       t.typtype = 'c' or coalesce(p.proargmodes::text[] && '{t,b,o}', false),
       coalesce((select json_agg(json_build_object('name', a.name, 'variadic', a.mode = 'v',
                     'required', a.n <= p.pronargs - p.pronargdefaults, 'array', a.elem <> 0,
                     'schema', tn.nspname, 'type', replace(tt.typname, 'bpchar', 'varchar')) order by a.n)
                 from (select u.name, u.mode, row_number() over (order by u.ord) as n, ut.oid,
                              case when ut.typcategory = 'A' then ut.typelem else 0 end as elem
                         from unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]),
                                     coalesce(p.proargmodes, array_fill('i'::"char", array[p.pronargs])),
                                     p.proargnames) with ordinality as u(type, mode, name, ord)
                         join pg_catalog.pg_type ut on ut.oid = u.type
                        where u.mode in ('i', 'b', 'v')) a
                 join pg_catalog.pg_type tt on tt.oid = case a.elem when 0 then a.oid else a.elem end
                 join pg_catalog.pg_namespace tn on tn.oid = tt.typnamespace), '[]')
  from pg_catalog.pg_proc p
  join pg_catalog.pg_namespace n on n.oid = p.pronamespace
  join pg_catalog.pg_type t on t.oid = p.prorettype
 where n.nspname = %s and p.proname = %s and p.prokind = 'f'
"""
_EXACT = {"23503": 409, "23505": 409, "25006": 405, "53400": 500, "57P01": 503, "P0001": 400, "42883": 404,
          "42P01": 404, "42P17": 500}
_PREFIX = {"08": 503, "09": 500, "0L": 403, "0P": 403, "25": 500, "28": 403, "2D": 500, "38": 500, "39": 500,
           "3B": 500, "40": 500, "53": 503, "54": 500, "55": 500, "57": 500, "58": 500, "F0": 500,
           "HV": 500, "P0": 500, "XX": 500}


def http_status(sqlstate: str, message: str, authenticated: bool) -> int:
    """PostgREST's HTTP status for a SQLSTATE (Error.hs ``mapSQLtoHTTP``)."""
    if sqlstate == "42501":
        return 403 if authenticated else 401
    if sqlstate == "21000":
        return 400 if message.endswith("requires a WHERE clause") else 500
    if sqlstate == "22023" and message.startswith("role") and message.endswith("does not exist"):
        return 401
    if sqlstate.startswith("PT") and sqlstate[2:].isdigit():
        return int(sqlstate[2:])
    return _EXACT.get(sqlstate) or _PREFIX.get(sqlstate[:2], 400)


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status, headers, media_type=JSON_TYPE)


def _pgrst(status: int, code: str, message: str, details: str | None = None, hint: str | None = None,
           headers: dict[str, str] | None = None) -> Response:
    body = {"code": code, "details": details, "hint": hint, "message": message}
    return _json(status, body, {"Proxy-Status": f"PostgREST; error={code}", **(headers or {})})


def _same(given: str | None, key: str | None) -> bool:
    return given is not None and key is not None and hmac.compare_digest(given.encode(), key.encode())


def _no_function(schema: str, fn: str, keys: list[str], post: bool, names: list[str],
                 overloads: list[list[str]]) -> Response:
    listed = ", ".join(keys)
    wanted = f" with parameter{'s' if len(keys) > 1 else ''} {listed}" if keys else " without parameters"
    unnamed = " or with a single unnamed json/jsonb parameter" if post else ""
    if overloads:  # like PostgREST: suggest the closest parameter list, else the closest function name
        lists = [f"({', '.join(sorted(o))})" for o in overloads]
        guess = next((fn + m for m in difflib.get_close_matches(f"({listed})", lists, 1, 0.33)), None)
    else:
        guess = next(iter(difflib.get_close_matches(fn, names, 1, 0.75)), None)
    return _pgrst(404, "PGRST202", f"Could not find the function {schema}.{fn}"
                  f"{f'({listed})' if keys else wanted} in the schema cache",
                  f"Searched for the function {schema}.{fn}{wanted}{unnamed}, but no matches were found in"
                  " the schema cache.", guess and f"Perhaps you meant to call the function {schema}.{guess}")


def _call(db_url: str, role: str, schema: str, fn: str, args: dict[str, Any], post: bool,
          claims: dict[str, Any] | None = None) -> Response:
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            if fn.startswith("table:"):
                return _select(conn, role, schema, fn.removeprefix("table:"), claims or {"role": role})
            return _invoke(conn, role, schema, fn, args, post, claims or {"role": role})
    except psycopg.Error as exc:
        if exc.sqlstate is None:
            return _pgrst(503, "PGRST000", "Database connection error. Retrying the connection.", str(exc))
        message = exc.diag.message_primary or str(exc)
        status = http_status(exc.sqlstate, message, authenticated=role != "anon")
        return _pgrst(status, exc.sqlstate, message, exc.diag.message_detail, exc.diag.message_hint,
                      _BEARER if status == 401 else None)


def _select(conn: psycopg.Connection[Any], role: str, schema: str, table: str,
            claims: dict[str, Any]) -> Response:
    """``GET /rest/v1/<table>`` with no filters: every row the role may read (RLS decides), as JSON."""
    with conn.transaction():
        conn.execute("set transaction read only")
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        conn.execute("select pg_catalog.set_config('request.jwt.claims', %s, true)", (json.dumps(claims),))
        row = conn.execute(sql.SQL("select coalesce(pg_catalog.json_agg(t), '[]')::text from {} t").format(
            sql.Identifier(schema, table))).fetchone()
    assert row is not None
    return Response(row[0], 200, media_type=JSON_TYPE)


def _invoke(conn: psycopg.Connection[Any], role: str, schema: str, fn: str, args: dict[str, Any],
            post: bool, claims: dict[str, Any]) -> Response:
    found = conn.execute(_ROUTINES, (schema, fn)).fetchall()
    matches = [r for r in found if all(a["name"] for a in r[4]) and set(args) <= {a["name"] for a in r[4]}
               and {a["name"] for a in r[4] if a["required"]} <= set(args)]
    if not matches:
        names = [n for (n,) in conn.execute(
            "select distinct p.proname from pg_catalog.pg_proc p join pg_catalog.pg_namespace n"
            " on n.oid = p.pronamespace where n.nspname = %s", (schema,))] if not found else []
        return _no_function(schema, fn, sorted(args), post, names, [[a["name"] for a in r[4]] for r in found])
    if len(matches) > 1:
        sigs = ", ".join(f"{schema}.{fn}({', '.join(a['name'] + ' => ' + a['type'] for a in r[4])})"
                         for r in matches)
        return _pgrst(300, "PGRST203", f"Could not choose the best candidate function between: {sigs}", None,
                      "Try renaming the parameters or the function itself in the database so function"
                      " overloading can be resolved")
    setof, volatility, void, composite, params = matches[0]
    used = [a for a in params if a["name"] in args]
    call_args = sql.SQL(", ").join(
        sql.SQL("{}{} := pgrst_body.{}").format(sql.SQL("VARIADIC " if a["variadic"] else ""),
                                               sql.Identifier(a["name"]), sql.Identifier(a["name"]))
        for a in used)
    call = sql.SQL("{}({}) pgrst_call" if composite else "(select {}({}) as pgrst_scalar) pgrst_call")
    body: sql.Composable = sql.SQL("")
    if used:  # PostgREST: json_to_record(<payload>) as _(<arg> <type>, ...)
        columns = sql.SQL(", ").join(sql.SQL("{} {}{}").format(sql.Identifier(a["name"]), sql.Identifier(
            a["schema"], a["type"]), sql.SQL("[]" if a["array"] else "")) for a in used)
        body = sql.SQL(", lateral (select * from pg_catalog.json_to_record(pgrst_payload.json_data) as _({})"
                       " limit 1) pgrst_body").format(columns)
    column = sql.SQL("_postgrest_t" if composite else "_postgrest_t.pgrst_scalar")
    agg = (sql.SQL("'null'::json") if void else sql.SQL("coalesce(pg_catalog.json_agg({}), '[]')") if setof
           else sql.SQL("coalesce(pg_catalog.json_agg({})->0, 'null')")).format(column)
    query = sql.SQL("with pgrst_source as (select pgrst_call.* from (select %s::json as json_data)"
                    " pgrst_payload{}, lateral {}) select ({})::text, pg_catalog.count(_postgrest_t)"
                    " from (select * from pgrst_source) _postgrest_t").format(
                        body, call.format(sql.Identifier(schema, fn), call_args), agg)
    search_path = sql.SQL(", ").join(map(sql.Identifier, (schema, "public", "extensions"))).as_string(conn)
    with conn.transaction():
        if not post or volatility in ("s", "i"):
            conn.execute("set transaction read only")
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
        conn.execute("select pg_catalog.set_config('search_path', %s, true), pg_catalog.set_config("
                     "'request.jwt.claims', %s, true), pg_catalog.set_config('request.method', %s, true)",
                     (search_path, json.dumps(claims), "POST" if post else "GET"))
        row = conn.execute(query, (json.dumps(args),)).fetchone()
    assert row is not None
    if void:
        return Response(status_code=204)
    rows = f"0-{row[1] - 1}/*" if row[1] else "*/*"
    return Response(row[0], 200, {"Content-Range": rows}, media_type=JSON_TYPE)


def create_app(db_url: str, *, service_key: str, anon_key: str | None = None,
               exposed_schemas: Sequence[str], jwt_secret: str | None = None) -> Starlette:
    """The stand-in as an ASGI app: ``POST`` and ``GET /rest/v1/rpc/{fn}`` (see the module docstring)."""
    schemas = list(exposed_schemas)
    if not schemas:
        raise ValueError("exposed_schemas must name at least one schema")

    async def rpc(request: Request) -> Response:
        apikey = request.headers.get("apikey")
        if apikey is None:
            return _json(401, {"message": "No API key found in request",
                               "hint": "No `apikey` request header or url param was found."})
        if not (_same(apikey, service_key) | _same(apikey, anon_key)):
            return _json(401, {"message": "Invalid API key",
                               "hint": "Double check your Supabase `anon` or `service_role` API key."})
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _pgrst(401, "PGRST302", "Anonymous access is disabled", None, None, _BEARER)
        roles = [r for k, r in ((service_key, "service_role"), (anon_key, "anon")) if _same(token.strip(), k)]
        claims = _user_claims(token.strip(), jwt_secret) if not roles else None
        if claims is not None:
            roles = [str(claims["role"])]
        if not roles:
            return _pgrst(401, "PGRST301", "No suitable key or wrong key type",
                          headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        post = request.method == "POST"
        schema = request.headers.get("content-profile" if post else "accept-profile") or schemas[0]
        if schema not in schemas:
            return _pgrst(406, "PGRST106", f"Invalid schema: {schema}", None,
                          f"Only the following schemas are exposed: {', '.join(schemas)}")
        args: dict[str, Any] = {}
        if post:
            raw = await request.body()
            try:
                args = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                return _pgrst(400, "PGRST102", "Empty or invalid json", str(exc))
            if not isinstance(args, dict):
                return _pgrst(400, "PGRST102", "The stand-in takes only a JSON object of named arguments")
        else:  # every query parameter is an argument; a repeated one (variadic) becomes a list
            for key in dict.fromkeys(k for k in request.query_params if k not in _RESERVED_QUERY):
                values = request.query_params.getlist(key)
                args[key] = values[0] if len(values) == 1 else values
        fn = request.path_params.get("fn") or "table:" + request.path_params["table"]
        return await run_in_threadpool(_call, db_url, roles[0], schema, fn, args, post, claims)

    return Starlette(routes=[Route("/rest/v1/rpc/{fn}", rpc, methods=["GET", "POST"]),
                             Route("/rest/v1/{table}", rpc, methods=["GET"])])


def _user_claims(token: str, jwt_secret: str | None) -> dict[str, Any] | None:
    """A signed-in user's JWT (Supabase Auth's access token, HS256 with the project's JWT secret):
    its claims, whose role PostgREST switches to; None when it is not one."""
    if jwt_secret is None:
        return None
    import jwt

    try:
        claims: dict[str, Any] = jwt.decode(token, jwt_secret, algorithms=["HS256"],
                                            options={"require": ["exp", "role"], "verify_aud": False})
    except jwt.PyJWTError:
        return None
    return claims if claims["role"] in ("anon", "authenticated") else None


@contextmanager
def serve(app: Starlette, *, timeout: float = 10.0) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1 (an ephemeral port) in a daemon thread; yield the base URL.
    No signal handlers are installed (uvicorn skips them outside the main thread); stopped on exit."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, name="postgrest-standin", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the PostgREST stand-in did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout)
