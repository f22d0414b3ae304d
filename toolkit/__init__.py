"""jobkit: Postgres-native background jobs for Supabase."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .config import Settings, load_settings
from .exceptions import JobkitError

try:
    __version__ = version("jobkit")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0.0.0+unknown"

__all__ = ["JobkitError", "Settings", "__version__", "load_settings"]
