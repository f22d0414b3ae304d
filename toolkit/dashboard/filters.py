"""The jobs page's filter: the operator API's (toolkit/ops/selection.py), so the page, the
confirmation count and the action (from the dashboard or the CLI) select the same jobs."""

from __future__ import annotations

from ..ops.selection import ACTION_STATES, FIELDS, STATES, JobFilter, parse_ids

__all__ = ["ACTION_STATES", "FIELDS", "STATES", "JobFilter", "parse_ids"]
