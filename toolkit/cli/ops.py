"""`jobkit status` and `jobkit doctor`."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import click
from rich.live import Live
from rich.table import Table

from ..durations import format_duration
from ..exceptions import DriftError
from ..ops import doctor as doctor_api
from ..ops import status as status_api
from ..ops.workers import WorkerRow
from .common import State, console, db_url_option, pass_state, timestamp, to_json

ICONS = {"pass": "[green]✓ pass[/]", "warn": "[yellow]! warn[/]", "fail": "[red]✗ fail[/]"}


#: The status table's columns. "failed attempts" (retried or final) and "dead jobs" are distinct words
#: everywhere (issue 26): a failed attempt may be retried; a failed job is out of attempts.
STATUS_COLUMNS = ("type", "runnable", "later", "running", "done 1h", "failed attempts 1h", "dead jobs 1h",
                  "cancelled 1h", "keys", "oldest due", "per min", "wake-ups 1h")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--watch", is_flag=True, help="Refresh every 2 seconds until Ctrl-C.")
@db_url_option
@pass_state
def status(state: State, as_json: bool, watch: bool, db_url: str | None) -> None:
    """The queue per type, wake-up health and schedules.

    \b
    Examples:
      jobkit status
      jobkit status --watch
      jobkit status --json | jq '.types[] | select(.runnable > 1000)'
    """
    app = state.app(db_url)

    def collect() -> status_api.QueueStatus:
        return status_api.collect(app.db, app.settings)

    if as_json:
        click.echo(to_json(collect().as_dict()))
        return
    if not watch:
        console().print(render(collect()))
        return
    with Live(render(collect()), console=console(), auto_refresh=False) as live:
        try:
            while True:
                time.sleep(2)  # the refresh interval
                live.update(render(collect()), refresh=True)
        except KeyboardInterrupt:
            pass


def render(st: status_api.QueueStatus) -> Table:
    table = Table(title="jobkit status", title_justify="left")
    for column in STATUS_COLUMNS:
        table.add_column(column, justify="left" if column in ("type", "wake-ups 1h") else "right")
    for t in st.types:
        wakes = ", ".join(f"{k} {v}" for k, v in sorted(st.wakeups.get(t.type, {}).items())) or "-"
        oldest = (format_duration(timedelta(seconds=round(t.oldest_runnable_s)))
                  if t.oldest_runnable_s is not None else "-")
        paused = " (paused)" if t.paused else f" ({t.paused_keys} keys paused)" if t.paused_keys else ""
        table.add_row(
            t.type + paused,
            str(t.runnable),
            str(t.scheduled),
            str(t.processing),
            str(t.completed_1h),
            str(t.failed_attempts_1h),
            str(t.dead_jobs_1h),
            str(t.cancelled_1h),
            _keys(t),
            oldest,
            f"{t.per_minute:g}",
            wakes,
        )
    if not st.types:
        table.add_row("(no jobs)", *[""] * 11)
    if st.keys:
        table.caption = "busiest keys: " + ", ".join(
            f"{k.type}/{k.key or '(none)'} {k.running} running {k.runnable} due" for k in st.keys[:10])
    for p in st.pauses:
        table.caption = (table.caption or "") + (
            f"\npaused: {p['type']}" + ("" if p["key"] is None else f" key {p['key']}")
            + f" since {timestamp(p['paused_at'])} (jobkit resume {p['type']}"
            + ("" if p["key"] is None else f" --key {p['key']}") + ")")
    workers = _workers(st.workers, st.worker_counts)
    table.caption = f"{table.caption}\n{workers}" if table.caption else workers
    for s in st.schedules:
        table.caption = (table.caption or "schedules:") + (
            f"\n  {s['name']} ({s['schedule']}){'' if s['active'] else ' PAUSED'}: "
            f"last {s['last_run'] or 'never'} {s['last_status'] or ''}"
        )
    return table


def _workers(workers: list[WorkerRow], n: dict[str, int]) -> str:
    """The workers table: a summary line, then one line per worker that is not gone."""
    alive, stale, gone = (n.get(k, 0) for k in ("alive", "stale", "gone"))
    lines = [f"workers: {alive} alive, {stale} stale (missed heartbeats), {gone} gone"]
    for w in workers:
        if w.state == "gone":
            continue
        seen = format_duration(timedelta(seconds=round(w.seen_ago_s)))
        up = format_duration(timedelta(seconds=round(w.uptime_s)))
        lines.append(f"  {w.id} {w.state.upper() if w.state == 'stale' else w.state}: pid {w.pid}, "
                     f"{w.transport}, {w.running}/{w.concurrency} running, seen {seen} ago, up {up}, "
                     f"v{w.version}")
    return "\n".join(lines)


def _keys(t: status_api.TypeStatus) -> str:
    """Keys with work, and a fair type's limits: "50 (2/key, 80 max)"."""
    if not t.fair:
        return str(t.keys) if t.keys else "-"
    limits = [f"{t.max_running_per_key}/key" if t.max_running_per_key else "",
              f"{t.max_running} max" if t.max_running else ""]
    shown = ", ".join(x for x in limits if x) or "fair"
    return f"{t.keys} ({shown})"


@click.command()
@click.option("--ping", is_flag=True, help="Also a live round trip: the database wakes the worker.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def doctor(state: State, ping: bool, as_json: bool, db_url: str | None) -> None:
    """Check the set-up; each check passes, warns or fails with its fix. Exit 3 on any failure.

    \b
    Examples:
      jobkit doctor
      jobkit doctor --ping
    """
    app = state.app(db_url, deployed=False)
    checks = doctor_api.run(app.db, app.settings, ping=ping, progress=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        out = console()
        for c in checks:
            out.print(f"{ICONS[c.status]}  {c.name}: {c.detail}", highlight=False, markup=True)
            if c.fix and c.status != "pass":
                out.print(f"          fix: {c.fix}", highlight=False, markup=False)
    if doctor_api.failed(checks):
        bad = [c.name for c in checks if c.status == "fail"]
        raise DriftError(
            f"doctor: {len(bad)} check(s) failed: {', '.join(bad)}", hint="apply the fixes above"
        )


COMMANDS = (status, doctor)
