"""`jobkit dev`: a local database (unless one is configured), jobkit deployed into it, and the
handlers to run: the user's, else the example ones. The CLI shows it live or runs the demo."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import RateLimitConfig, Settings
from ..connector import Database
from ..exceptions import JobkitError
from ..handlers import Registry
from ..schema.deploy import deploy
from ..worker.serve import load_registry
from .demo import Outcome
from .example import example_registry
from .localdb import LocalCluster

#: The demo's rate-limited handler (demo.api) shares this bucket unless jobkit.toml declares it.
DEMO_LIMIT = RateLimitConfig(2.0, 1)


@dataclass
class DevEnv:
    """What `jobkit dev` runs on."""

    settings: Settings
    db: Database
    registry: Registry
    head: str | None
    cluster: LocalCluster | None  # started here (stopped by stop()); None with a configured URL

    def stop(self) -> bool:
        """Stop the local database if this DevEnv started it; True when it did."""
        if self.cluster is None:
            return False
        self.cluster.stop()
        return True


def start(settings: Settings, app_spec: str | None, echo: Callable[[str], None]) -> DevEnv:
    """Start (or reuse) the database, deploy, and load the handlers."""
    cluster = None if settings.db_url else LocalCluster(settings.home)
    was_running = cluster is not None and cluster.status().running
    url = settings.db_url or cluster.start()  # type: ignore[union-attr]
    try:
        registry = registry_for(app_spec)
        settings = with_demo_limit(replace(settings, db_url=url))
        db = Database(url, application_name="jobkit dev")
        report = deploy(db, settings, echo=echo)
    except BaseException:
        if cluster is not None and not was_running:
            cluster.stop()  # a database this command started does not outlive its failure
            echo("stopped the local database")
        raise
    return DevEnv(settings, db, registry, report.head, cluster)


def registry_for(app_spec: str | None, cwd: Path | None = None) -> Registry:
    """MODULE:REGISTRY when given; else jobs:jobs when ./jobs.py exists; else the example handlers."""
    if app_spec:
        return load_registry(app_spec)
    if ((cwd or Path.cwd()) / "jobs.py").is_file():
        return load_registry("jobs:jobs")
    return example_registry()


def with_demo_limit(settings: Settings) -> Settings:
    if "demo-api" in settings.ratelimits:
        return settings
    return replace(settings, ratelimits={**settings.ratelimits, "demo-api": DEMO_LIMIT})


def verify(outcomes: list[Outcome]) -> None:
    """Raise unless every demo job reached its expected state."""
    bad = [o for o in outcomes if not o.ok]
    if bad:
        raise JobkitError(f"{len(bad)} demo job(s) ended in an unexpected state: {bad[0].label}",
                          hint="see the table above and `jobkit jobs show ID`")
