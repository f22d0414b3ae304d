"""Split an SQL script into its top-level statements (for applying each in a savepoint).

Knows what can hide a semicolon: ``--`` and ``/* */`` comments, 'strings', "identifiers" and
$tag$ dollar quotes. Each statement keeps the comment lines above it.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$([A-Za-z_][A-Za-z0-9_]*)?\$|;", re.S)


def split(script: str) -> list[str]:
    """The statements of ``script``, in order, without empty ones."""
    statements: list[str] = []
    start = pos = 0
    while (match := _TOKEN.search(script, pos)) is not None:
        token = match.group(0)
        if token.startswith("$"):
            end = script.find(token, match.end())
            pos = len(script) if end < 0 else end + len(token)
            continue
        pos = match.end()
        if token == ";":
            statements.append(script[start:pos])
            start = pos
    statements.append(script[start:])
    return [s.strip() for s in statements if _has_code(s)]


def _has_code(text: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in text.splitlines())
