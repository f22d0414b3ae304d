"""The example handlers `jobkit init` writes (templates/jobs.py), loaded from the package."""

from __future__ import annotations

from typing import Any

from ..handlers import Registry
from ..resources import read_text, templates_root


def example_registry() -> Registry:
    """A fresh Registry with the example handlers (demo.email, demo.flaky, demo.api, demo.doomed)."""
    source = read_text(templates_root(), "jobs.py")
    namespace: dict[str, Any] = {"__name__": "jobkit_example_jobs"}
    exec(compile(source, "jobkit/_templates/jobs.py", "exec"), namespace)  # noqa: S102 - our own file
    registry = namespace["jobs"]
    assert isinstance(registry, Registry)
    return registry
