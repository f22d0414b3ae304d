"""`jobkit init`: write a project's jobkit.toml, example handlers, Supabase migration, CI step and
the worker's Dockerfile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import load_settings
from ..exceptions import ConfigError
from ..resources import read_text, templates_root
from ..schema.supabase_cli import write_migration

#: target path in the project -> template under templates/
FILES = {
    "jobkit.toml": "jobkit.toml",
    "jobs.py": "jobs.py",
    ".github/workflows/jobkit.yml": "github/jobkit.yml",
    "Dockerfile": "Dockerfile",
    ".dockerignore": "dockerignore",
}


@dataclass(frozen=True)
class InitReport:
    written: list[Path]
    migration: Path | None


def init(target: Path, *, force: bool = False) -> InitReport:
    """Write the templates into ``target``; refuse to overwrite anything unless ``force``."""
    existing = [name for name in FILES if (target / name).exists()]
    if existing and not force:
        raise ConfigError(f"{target / existing[0]} already exists; nothing was written",
                          hint="use --force to overwrite, or init into another folder")
    texts = {name: _fill(read_text(templates_root(), source)) for name, source in FILES.items()}
    written = []
    for name, text in texts.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    settings = load_settings(target / "jobkit.toml", env={})
    migration = write_migration(settings, target / "supabase")
    return InitReport(written, migration)


def _fill(text: str) -> str:
    """Templates name the running jobkit's version where a project pins it (the CI workflow)."""
    from .. import __version__

    return text.replace("@JOBKIT_VERSION@", __version__)
