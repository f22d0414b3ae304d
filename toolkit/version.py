"""jobkit's version (``jobkit.__version__``), read from the installed distribution's metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jobkit-pg")  # the distribution's name; the import is jobkit
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0.0.0+unknown"
