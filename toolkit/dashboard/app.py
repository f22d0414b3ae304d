"""The dashboard's web app: Starlette routes over data.py and actions.py, pages rendered on the
server with jinja2, a little htmx for live parts and uPlot for the charts (both vendored in
static/ with their licenses: no CDN, so it works offline under a strict Content-Security-Policy).

Every route goes through :meth:`Dashboard._route`: the Host check, authentication, then for POST
the read-only switch and the CSRF token. GET never changes anything (tests/browser and
tests/integration/test_dashboard.py check the database before and after every page).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..config import Settings
from ..connector import Database, SessionPool
from ..cron import runnow
from ..cron.pg_cron import CronJobs
from ..durations import format_time
from ..exceptions import ConfigError, ConnectionFailed, JobkitError, NotFound
from ..logthrottle import throttled
from ..ops import flows as flowops
from ..ops import operate
from ..ops import triggers as row_triggers
from ..ops import workers as worker_rows
from ..ops.admin import tries
from ..ops.types import declared
from ..queries import queries
from . import actions, data, look
from .auth import COOKIE, SESSION_SECONDS, AuthConfig, Guard, Identity, Refused, is_loopback, same_origin
from .filters import JobFilter, parse_ids

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer browsers send `Origin: null` with every form
    # POST, which the Origin check refuses; same-origin still sends nothing to other sites
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
log = logging.getLogger("jobkit.dashboard")
refused = throttled("jobkit.dashboard.refused")  # anyone can cause these: rate-limited
MAX_FORM = 256 * 1024  # bytes of a POST body; 1,000 selected job ids take about 45 KB
WINDOWS = {"1h": timedelta(hours=1), "1d": timedelta(days=1)}
STRIP = 50  # runs in a schedule's strip of successes and failures


@dataclass
class Call:
    """One request as a page handler sees it (read in the event loop, handled in a thread)."""

    request: Request
    identity: Identity
    form: dict[str, list[str]] = field(default_factory=dict)

    def arg(self, name: str) -> str:
        values = self.form.get(name)
        return values[0] if values else str(self.request.query_params.get(name, ""))

    def values(self) -> dict[str, str]:
        found = {k: v for k, v in self.request.query_params.items()}
        found.update({k: v[0] for k, v in self.form.items() if v})
        return found


Handler = Callable[[Call], Response]


class Dashboard:
    """The dashboard for one database. ``app`` is the ASGI app: serve it (``jobkit dashboard``) or
    mount it inside another Starlette app (``Mount("/jobkit", dashboard.app)``)."""

    def __init__(self, url: str, settings: Settings, *, auth: AuthConfig | None = None,
                 read_only: bool = False, pool_size: int = 4, count_bound: int = data.BOUND) -> None:
        self.settings, self.schema = settings, settings.schema
        self.pool = SessionPool(url, size=pool_size)
        self.db = Database(url, application_name="jobkit dashboard")
        self.guard = Guard(auth or AuthConfig())
        self.read_only = read_only
        self.bound = count_bound  # counts are exact up to it, estimated beyond
        self.templates = Environment(loader=PackageLoader("jobkit.dashboard", "templates"),
                                     autoescape=select_autoescape(default=True))
        self.templates.filters["duration"] = _duration
        self.templates.filters["when"] = _when
        look.install(self.templates)
        self.project = look.project_name(url)
        self.executor = ThreadPoolExecutor(2, thread_name_prefix="jobkit-dashboard-action")
        self._opened = False
        self._cron_jobs: CronJobs | None = None
        self._lock = threading.Lock()
        self.app: ASGIApp = SecurityHeaders(Starlette(routes=self._routes()))

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        if self._opened:
            self.pool.close()

    # ---- routing -------------------------------------------------------------------------------
    def _routes(self) -> list[Route | Mount]:
        get, post = ["GET"], ["POST"]
        return [
            Route("/", self._route(self.overview), methods=get),
            Route("/fragments/overview", self._route(self.overview_fragment), methods=get),
            Route("/jobs", self._route(self.jobs), methods=get),
            Route("/fragments/jobs", self._route(self.jobs_fragment), methods=get),
            Route("/jobs/{id}", self._route(self.job), methods=get),
            Route("/jobs/{id}/replay", self._route(self.replay, post=True), methods=post),
            Route("/actions", self._route(self.audit), methods=get),
            Route("/actions/confirm", self._route(self.confirm, post=True), methods=post),
            Route("/actions/run", self._route(self.run_action, post=True), methods=post),
            # {id}, not {id:int}: starlette's int() of a 5,000-digit path raised (a 500); _progress checks it
            Route("/actions/{id}", self._route(self.action), methods=get),
            Route("/actions/{id}/progress", self._route(self.action_progress), methods=get),
            Route("/schedules", self._route(self.schedules), methods=get),
            Route("/schedules/active", self._route(self.schedule_active, post=True), methods=post),
            Route("/schedules/run", self._route(self.schedule_run, post=True), methods=post),
            Route("/types/active", self._route(self.type_active, post=True), methods=post),
            Route("/ratelimits", self._route(self.ratelimits), methods=get),
            Route("/triggers", self._route(self.triggers), methods=get),
            Route("/workers", self._route(self.workers), methods=get),
            Route("/fragments/workers", self._route(self.workers_fragment), methods=get),
            Route("/login", self._open(self.login_page), methods=get),
            Route("/login", self._open(self.login), methods=post),
            Route("/logout", self._route(self.logout, post=True), methods=post),
            Mount("/static", StaticFiles(packages=[("jobkit.dashboard", "static")]), name="static"),
        ]

    def _route(self, handler: Handler, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if refused := self._host_refused(request) or _origin_refused(request):
                return refused
            identity = self.guard.identify(request.headers.get("authorization"), request.cookies.get(COOKIE))
            if identity is None:
                return self._unauthenticated(request)
            form = await _form(request) if post else {}
            if isinstance(form, Response):
                return form
            if post and (refused := self._post_refused(request, identity, form)):
                return refused
            return await run_in_threadpool(self._handle, handler, Call(request, identity, form))
        return endpoint

    def _open(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A route that needs no session (the login page)."""
        async def endpoint(request: Request) -> Response:
            if refused := self._host_refused(request) or _origin_refused(request):
                return refused
            form = await _form(request) if request.method == "POST" else {}
            if isinstance(form, Response):
                return form
            return await run_in_threadpool(self._handle, handler, Call(request, Identity("", ""), form))
        return endpoint

    def _post_refused(self, request: Request, identity: Identity,
                      form: dict[str, list[str]]) -> Response | None:
        """The read-only switch, then the CSRF token: from the form body or the X-CSRF-Token header
        only (never the query string, which ends up in logs, history and Referer headers)."""
        if self.read_only:
            return PlainTextResponse("read-only dashboard: actions are off", status_code=403)
        token = (form.get("csrf") or [request.headers.get("x-csrf-token", "")])[0]
        if self.guard.csrf_ok(identity, token):
            return None
        return _refuse(request, 403, "missing or wrong CSRF token: reload the page and try again")

    def _handle(self, handler: Handler, call: Call) -> Response:
        self._ensure_open()
        try:
            return handler(call)
        except NotFound as exc:
            return self._error(call, exc, 404)
        except ConnectionFailed as exc:
            return self._error(call, exc, 503)
        except JobkitError as exc:
            return self._error(call, exc, 400)

    def open(self) -> None:
        """Open the connection pool (else the first request does)."""
        self._ensure_open()

    def _ensure_open(self) -> None:
        with self._lock:
            if not self._opened:
                self.pool.open()
                self._opened = True

    def _host_refused(self, request: Request) -> Response | None:
        """Without authentication only loopback Host names are served (no DNS rebinding)."""
        if self.guard.required or is_loopback(request.url.hostname or ""):
            return None
        return _refuse(request, 421, "this dashboard answers loopback host names only")

    def _unauthenticated(self, request: Request) -> Response:
        if request.headers.get("authorization"):
            refused.warning("refused %s %r: wrong credential", request.method, request.url.path[:200])
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            base = _base(request)
            path = request.url.path[len(base):] if request.url.path.startswith(base) else request.url.path
            target = path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"{_base(request)}/login?next={quote(target)}", status_code=303)
        return PlainTextResponse("authentication required: sign in at /login or send "
                                 "Authorization: Bearer <token>", status_code=401,
                                 headers={"www-authenticate": "Bearer"})

    # ---- rendering -----------------------------------------------------------------------------
    def render(self, call: Call, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        page = self.templates.get_template(template).render(
            base=_base(call.request), csrf=self.guard.csrf_token(call.identity), identity=call.identity,
            read_only=self.read_only, auth=self.guard.required, version=__version__,
            schema=self.schema, project=self.project, path=call.request.url.path, **context)
        return HTMLResponse(page, status_code=status)

    def _error(self, call: Call, exc: JobkitError, status: int) -> Response:
        return self.render(call, "error.html", status=status, message=exc.message, hint=exc.hint)

    # ---- pages ---------------------------------------------------------------------------------
    def overview(self, call: Call) -> Response:
        window = call.arg("window") if call.arg("window") in WINDOWS else "1h"
        chart_type = call.arg("type") or None
        with self.pool.session() as s:
            view = data.overview(s, self.schema, declared(self.settings))
            states = data.state_counts(s, self.schema, None, self.bound)
            series = data.series(s, self.schema, WINDOWS[window], chart_type)
            types = data.job_types(s, self.schema)
            schedules = self._schedule_views()
            running = data.scheduler_running(s, self.schema)
        return self.render(call, "overview.html", view=view, series=series, window=window,
                           chart_type=chart_type or "", types=types, schedules=schedules,
                           scheduler_running=running, states=states, flt=JobFilter())

    def overview_fragment(self, call: Call) -> Response:
        with self.pool.session() as s:
            view = data.overview(s, self.schema, declared(self.settings))
            states = data.state_counts(s, self.schema, None, self.bound)
        return self.render(call, "_overview_table.html", view=view, states=states, flt=JobFilter())

    def jobs(self, call: Call) -> Response:
        return self.render(call, "jobs.html", **self._jobs_view(call))

    def jobs_fragment(self, call: Call) -> Response:
        """The state bar, the total and the rows of the jobs page: what its auto-refresh swaps in."""
        return self.render(call, "_jobs_live.html", **self._jobs_view(call))

    def _jobs_view(self, call: Call) -> dict[str, Any]:
        flt = JobFilter.parse(call.values())
        cursor = call.arg("cursor") or None
        with self.pool.session() as s:
            page = data.jobs_page(s, self.schema, flt, cursor)
            total = data.filter_total(s, self.schema, flt, page, first_page=cursor is None, bound=self.bound)
            states = data.state_counts(s, self.schema, flt.type or None, self.bound)
            types = data.job_types(s, self.schema)
            unindexed = bool(flt.payload) and not data.payload_indexed(s, self.schema)
        return {"page": page, "flt": flt, "types": types, "unindexed": unindexed, "total": total,
                "states": states, "request_cursor": call.arg("cursor")}

    def job(self, call: Call) -> Response:
        job_id = parse_ids([call.request.path_params["id"]])[0]
        with self.pool.session() as s:
            found = data.job_detail(s, self.schema, job_id)
            limit = s.scalar(queries(self.schema)["job_attempt_limit"], {"id": job_id}) if found else None
            graph = flowops.job_graph(s, self.schema, job_id) if found else None
        if found is None or limit is None:
            raise NotFound(f"no job {job_id}", hint="it may have been pruned or deleted; see the jobs page")
        job, history = found
        return self.render(call, "job.html", job=job, history=history, states=_allowed(job.status.value),
                           tries=tries(job.attempts, job.round_start, int(limit)), graph=graph,
                           replay=not self.read_only)

    def replay(self, call: Call) -> Response:
        """Replay a durable job from one of its steps as a new job (audited); shows the new job."""
        job_id = parse_ids([call.request.path_params["id"]])[0]
        new_id = flowops.replay(self.pool, self.schema, job_id, call.arg("step"), self._actor(call))
        return RedirectResponse(f"{_base(call.request)}/jobs/{new_id}", status_code=303)

    def confirm(self, call: Call) -> Response:
        action = self._action(call)
        with self.pool.session() as s:
            n = actions.count(s, self.schema, action)
            sample = operate.sample(s, self.schema, action)
        return self.render(call, "confirm.html", action=action, n=n, flt=action.filter,
                           target=action.describe(), sample=sample, section="jobs")

    def run_action(self, call: Call) -> Response:
        action = self._action(call)
        matched = _count(call.arg("matched") or "0")
        with self.pool.session() as s:
            audit_id = actions.start(s, self.schema, action, self._actor(call), matched)
        self.executor.submit(actions.run, self.pool, self.schema, audit_id, action).add_done_callback(
            functools.partial(_log_failure, audit_id))
        return RedirectResponse(f"{_base(call.request)}/actions/{audit_id}", status_code=303)

    def action(self, call: Call) -> Response:
        return self.render(call, "action.html", row=self._progress(call), section="jobs")

    def action_progress(self, call: Call) -> Response:
        return self.render(call, "_progress.html", row=self._progress(call))

    def audit(self, call: Call) -> Response:
        with self.pool.session() as s:
            rows = data.audit_recent(s, self.schema)
        for row in rows:
            row["target_text"] = actions.describe(row["target"])
            row["skipped_text"] = actions.describe_skipped(row.get("skipped"))
        return self.render(call, "audit.html", rows=rows)

    def schedules(self, call: Call) -> Response:
        with self.pool.session() as s:
            views = data.schedules(self.db, self.settings, self._cron(), runs_each=STRIP)
            running = data.scheduler_running(s, self.schema)
        return self.render(call, "schedules.html", schedules=views, scheduler_running=running,
                           queued=call.arg("queued"))

    def schedule_run(self, call: Call) -> Response:
        """Run a schedule now: a one-off pg_cron job runs its command at pg_cron's next minute
        (toolkit/cron/runnow.py), so the run is in cron.job_run_details; audited."""
        with self.pool.session() as s:
            done = runnow.run_now(s, self.settings, self._cron(), call.arg("name"), self._actor(call))
        return RedirectResponse(f"{_base(call.request)}/schedules?queued={quote(done.schedule)}",
                                status_code=303)

    def schedule_active(self, call: Call) -> Response:
        name, active = call.arg("name"), call.arg("active") == "true"
        cron = self._cron()
        job = cron.find(name)
        if job is None:
            raise NotFound(f"no schedule {name!r}", hint="see the schedules page")
        cron.set_active(job, active)
        with self.pool.session() as s:
            verb = "resume_schedule" if active else "pause_schedule"
            s.execute(queries(self.schema)["dash_audit_schedule"],
                      {"actor": self._actor(call), "action": verb, "name": name})
        return RedirectResponse(f"{_base(call.request)}/schedules", status_code=303)

    def type_active(self, call: Call) -> Response:
        """Pause or resume a job type (or one key of it) in every worker, audited."""
        job_type, key, active = call.arg("type"), call.arg("key") or None, call.arg("active") == "true"
        operate.set_paused(self.pool, self.schema, job_type, key, paused=not active, actor=self._actor(call))
        return RedirectResponse(f"{_base(call.request)}/", status_code=303)

    def ratelimits(self, call: Call) -> Response:
        with self.pool.session() as s:
            buckets, snoozes = data.ratelimits(s, self.schema)
        return self.render(call, "ratelimits.html", buckets=buckets, snoozes=snoozes)

    def triggers(self, call: Call) -> Response:
        """The row triggers deploy manages ([triggers.<name>]): state and jobs of the last hour."""
        with self.pool.session() as s:
            rows = row_triggers.rows(s, self.settings)
        return self.render(call, "triggers.html", triggers=rows)

    def workers(self, call: Call) -> Response:
        """The worker processes (the workers table, 0021), each with the jobs it holds now."""
        return self._workers(call, "workers.html")

    def workers_fragment(self, call: Call) -> Response:
        return self._workers(call, "_workers_table.html")

    def _workers(self, call: Call, template: str) -> Response:
        with self.pool.session() as s:
            rows, counts = worker_rows.read(s, self.schema), worker_rows.counts(s, self.schema)
        return self.render(call, template, workers=rows, counts=counts)

    def login_page(self, call: Call) -> Response:
        if not self.guard.required:
            return RedirectResponse(f"{_base(call.request)}/", status_code=303)
        return self.render(call, "login.html", next=_safe_next(call.arg("next")), failed=False,
                           mode=self.guard.config.mode)

    def login(self, call: Call) -> Response:
        try:
            identity, cookie = self.guard.login(call.arg("credential"))
        except Refused:
            refused.warning("refused %s %r: wrong credential", call.request.method,
                            call.request.url.path[:200])
            return self.render(call, "login.html", status=401, next=_safe_next(call.arg("next")),
                               failed=True, mode=self.guard.config.mode)
        response = RedirectResponse(f"{_base(call.request)}{_safe_next(call.arg('next'))}", status_code=303)
        response.set_cookie(COOKIE, cookie, max_age=SESSION_SECONDS, httponly=True, samesite="strict",
                            secure=call.request.url.scheme == "https", path=_base(call.request) or "/")
        return response

    def logout(self, call: Call) -> Response:
        response = RedirectResponse(f"{_base(call.request)}/login", status_code=303)
        response.delete_cookie(COOKIE, path=_base(call.request) or "/")
        return response

    # ---- helpers -------------------------------------------------------------------------------
    def _action(self, call: Call) -> actions.Action:
        verb = call.arg("verb")
        if call.arg("scope") == "filter":
            # "act on every job matching the filter" is the page's explicit choice; with no filter
            # the confirmation page says "no filter (all jobs)" and its count before anything runs
            return actions.Action(verb, None, JobFilter.parse(call.values()), everything=True)
        return actions.Action(verb, tuple(parse_ids(call.form.get("ids", []))))

    def _progress(self, call: Call) -> dict[str, Any]:
        text = str(call.request.path_params["id"])
        if not (text.isascii() and text.isdigit() and len(text) <= 18):
            raise NotFound(f"no action {text[:40]!r}", hint="see the actions page")
        audit_id = int(text)
        with self.pool.session() as s:
            row = actions.progress(s, self.schema, audit_id)
        if row is None:
            raise NotFound(f"no action {audit_id}", hint="see the actions page")
        return row

    def _schedule_views(self) -> list[data.ScheduleView]:
        return data.schedules(self.db, self.settings, self._cron())

    def _cron(self) -> CronJobs:
        """pg_cron's side (it may live in another database of the server), found once."""
        with self._lock:
            if self._cron_jobs is None:
                self._cron_jobs = CronJobs(self.db, self.settings)
            return self._cron_jobs

    def _actor(self, call: Call) -> str:
        client = call.request.client.host if call.request.client else "?"
        return f"{call.identity.actor}@{client}"


class SecurityHeaders:
    """Adds the CSP, X-Frame-Options and friends to every response, static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.inner = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.inner(scope, receive, sending if scope["type"] == "http" else send)


def _log_failure(audit_id: int, done: Future[None]) -> None:
    """actions.run records its own errors on the audit row; if even that failed (the database
    went away), say so here instead of losing it in the thread."""
    if not done.cancelled() and done.exception() is not None:
        log.error("dashboard action %s stopped and could not record why", audit_id, exc_info=done.exception())


def create_dashboard(url: str, settings: Settings, **options: Any) -> Dashboard:
    """A :class:`Dashboard`; options as its constructor."""
    return Dashboard(url, settings, **options)


async def _form(request: Request) -> dict[str, list[str]] | Response:
    """The POST's form fields, or a 411/413 for a body without a length or over MAX_FORM bytes."""
    declared = request.headers.get("content-length")
    if declared is None and "transfer-encoding" in request.headers:
        return PlainTextResponse("a form needs a Content-Length header", status_code=411)
    if declared is not None and not (declared.isascii() and declared.isdigit() and len(declared) < 20):
        return PlainTextResponse("Content-Length is not a number", status_code=400)
    if int(declared or 0) > MAX_FORM:
        return PlainTextResponse(f"the form is larger than {MAX_FORM} bytes", status_code=413)
    form = await request.form()
    found: dict[str, list[str]] = {}
    for key, value in form.multi_items():
        if isinstance(value, str):
            found.setdefault(key, []).append(value)
    return found


def _origin_refused(request: Request) -> Response | None:
    """A POST whose Origin (sent by every browser) is not this dashboard's: 403."""
    origin = request.headers.get("origin")
    if request.method != "POST" or origin is None:
        return None
    hosts = [request.headers.get("host", ""), request.headers.get("x-forwarded-host", "").split(",")[0]]
    if same_origin(origin, [h.strip() for h in hosts if h.strip()]):
        return None
    return _refuse(request, 403, "cross-origin request refused: its Origin is not this dashboard")


def _refuse(request: Request, status: int, message: str) -> Response:
    refused.warning("refused %s %r: %s", request.method, request.url.path[:200], message)
    return PlainTextResponse(message, status_code=status)


def _count(text: str) -> int:
    """The confirmed count a run form carries back: a plain decimal number of a sane size."""
    if not (text.isascii() and text.isdigit() and len(text) <= 12):
        raise ConfigError("matched must be the count the confirmation page showed",
                          hint="confirm the action again from the jobs page")
    return int(text)


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _safe_next(target: str) -> str:
    """Only a path of this site (no //host, no scheme): no open redirect after login."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


def _allowed(status: str) -> list[str]:
    from .filters import ACTION_STATES

    return [verb for verb, states in ACTION_STATES.items() if status in states]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _when(value: Any) -> str:
    """Times as the CLI prints them (durations.format_time)."""
    return format_time(value if isinstance(value, datetime) else None)

