"""`jobkit init`."""

from __future__ import annotations

from pathlib import Path

import click

from ..ops.scaffold import init as init_project


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--force", is_flag=True, help="Overwrite existing files.")
def init(directory: Path, force: bool) -> None:
    """Write jobkit.toml, example handlers (jobs.py), the Supabase migration and a CI workflow.

    \b
    Example:
      jobkit init my-app && cd my-app && jobkit dev --demo
    """
    report = init_project(directory, force=force)
    for path in report.written:
        click.echo(f"wrote {path}")
    if report.migration:
        click.echo(f"wrote {report.migration}")
    click.echo("next: `jobkit dev --demo` runs the example handlers on a local database")
