"""The CLI reference page (docs/reference/cli.md) lists every command and option the CLI has (a
generated block), and the `jobkit init` template's jobkit.toml states the built-in defaults exactly."""

from __future__ import annotations

from pathlib import Path

from jobkit.cli import cli
from jobkit.cli.reference import END, START, commands, reference
from jobkit.config import MAINTENANCE_DEFAULTS, Settings, load_settings

ROOT = Path(__file__).parents[2]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"


def test_the_cli_pages_command_reference_is_current() -> None:
    readme = CLI_PAGE.read_text()
    block = readme[readme.index(START):readme.index(END) + len(END)]
    assert block == reference(cli), "regenerate it: python -m jobkit.docs_ref (writes the reference pages)"


def test_every_option_of_every_command_is_on_the_cli_page() -> None:
    readme = CLI_PAGE.read_text()
    for path, command in commands(cli):
        assert f"jobkit {' '.join(path)}" in readme
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    assert opt in readme, f"jobkit {' '.join(path)} {opt}"


def test_the_init_templates_config_is_the_built_in_defaults() -> None:
    template = load_settings(ROOT / "templates" / "jobkit.toml", env={})
    defaults = Settings()
    assert dict(template.maintenance) == MAINTENANCE_DEFAULTS == dict(defaults.maintenance)
    assert template.defaults == defaults.defaults
    assert template.wake == defaults.wake and template.retention == defaults.retention
