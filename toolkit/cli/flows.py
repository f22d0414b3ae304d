"""`jobkit flows`: show, cancel, pause and resume a job graph (jobkit.flow)."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.tree import Tree

from ..ops import flows as flowops
from .common import State, console, db_url_option, pass_state, timestamp, to_json
from .operate import cli_actor
from .pause import as_option


@click.group()
def flows() -> None:
    """Look at and act on job graphs (jobkit.flow, jobkit.gather).

    \b
    Example:
      jobkit flows show 3f0c5b0e-...
    """


@flows.command()
@click.argument("flow_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def show(state: State, flow_id: str, as_json: bool, db_url: str | None) -> None:
    """A flow's graph (ID: the flow's id or one of its jobs'): each job with its state and
    parents, and a durable job's steps with their timing.

    \b
    Example:
      jobkit flows show 3f0c5b0e-...
    """
    app = state.app(db_url)
    view = flowops.show(app.db, app.settings.schema, flowops.parse_id(flow_id))
    if as_json:
        click.echo(to_json(view.__dict__))
        return
    counts = ", ".join(f"{n} {status}" for status, n in sorted(view.counts.items()))
    paused = f"  paused since {timestamp(view.paused_at)}" if view.paused_at else ""
    tree = Tree(escape(f"flow {view.id} {view.name or ''}  {view.total} jobs: {counts}{paused}"))
    position = {job["id"]: i + 1 for i, job in enumerate(view.jobs)}
    for i, job in enumerate(view.jobs, 1):
        after = ", ".join(f"#{position.get(p, '?')}" for p in job["parents"])
        node = tree.add(escape(f"#{i} {job['id']} {job['type']}  {job['status']}"
                               + (f"  after {after}" if after else "")
                               + (f"  ({job['last_error']})" if job["last_error"] else "")))
        for step in job.get("steps", []):
            took = (step["finished_at"] - step["started_at"]).total_seconds() * 1000
            node.add(escape(f"step {step['name']}#{step['occurrence']} {step['status']} "
                            f"at {timestamp(step['started_at'])} took {took:.0f} ms"))
    if view.total > len(view.jobs):
        tree.add(f"... {view.total - len(view.jobs)} more jobs not shown")
    console().print(tree, soft_wrap=True)  # ids and errors whole, never folded


def _action(verb: str, done: str) -> click.Command:
    @click.command(verb, help=f"{verb.capitalize()} a flow (ID: its id or one of its jobs'). Audited.\n\n"
                              f"\b\nExample:\n  jobkit flows {verb} 3f0c5b0e-...")
    @click.argument("flow_id", metavar="ID")
    @as_option
    @db_url_option
    @pass_state
    def command(state: State, flow_id: str, actor: str | None, db_url: str | None) -> None:
        app = state.app(db_url)
        n = flowops.act(app.db, app.settings.schema, flowops.parse_id(flow_id), verb, cli_actor(actor))
        click.echo(f"{done} {n} job(s) of flow {flow_id}")
    return command


flows.add_command(_action("cancel", "cancelled"))
flows.add_command(_action("pause", "held back"))
flows.add_command(_action("resume", "released"))
