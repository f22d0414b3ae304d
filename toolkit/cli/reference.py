"""The command table of the CLI reference page (docs/reference/cli.md), generated from the click
tree so that every command and option appears in it (tests/unit/test_readme.py regenerates it):

    python -m jobkit.cli.reference    # prints the block between docs/reference/cli.md's markers
"""

from __future__ import annotations

import click

START, END = "<!-- cli-reference:start -->", "<!-- cli-reference:end -->"


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every leaf command under ``group`` with its path, in name order."""
    out: list[tuple[tuple[str, ...], click.Command]] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if isinstance(command, click.Group):
            out += commands(command, (*prefix, name))
        else:
            out.append(((*prefix, name), command))
    return out


def reference(root: click.Group) -> str:
    """A markdown table: each command, its arguments and options, and the first line of its help."""
    rows = ["| command | options | what it does |", "|---|---|---|"]
    for path, command in commands(root):
        args = " ".join(
            p.human_readable_name.upper() for p in command.params if isinstance(p, click.Argument))
        options = ", ".join(
            "/".join(f"`{o}`" for o in p.opts + p.secondary_opts)
            for p in command.params if isinstance(p, click.Option) and p.name != "help"
        )
        summary = (command.help or "").strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|")
        rows.append(f"| `jobkit {' '.join(path)}{' ' + args if args else ''}` | {options} | {summary} |")
    root_options = ", ".join("/".join(f"`{o}`" for o in p.opts) for p in root.params
                             if isinstance(p, click.Option) and p.name != "help")
    return "\n".join([START, f"Global options (before the command): {root_options}.", "", *rows, END])


if __name__ == "__main__":  # pragma: no cover - the documented command
    from . import cli

    print(reference(cli))
