"""The docs' example runner (issue 26): every fenced block of README.md and docs/**/*.md, through
sybil's markdown lexers, with one evaluator per language.

- ``python``: executed, top to bottom in one namespace per page (top-level ``await`` runs in an
  event loop). ``<!-- invisible-code-block: python -->`` blocks set up what a page assumes (a
  database URL from the test fixture, a worker draining in the background) and check results.
- ``<!-- compile-only: "reason" -->`` before a python block: compiled and its imports run, not
  executed (it needs something outside: your app, a provider's account).
- ``<!-- skip: next "reason" -->`` (sybil's own): not runnable at all here (a browser, Supabase).
- ``toml``: read by jobkit's config reader (``parse_settings``); ``sh``: ``bash -n``, and every
  ``jobkit`` command in it parsed by the real click tree; ``sql``: parsed by PostgreSQL's parser
  (pglast); ``yaml``: parsed; ``dockerfile``: its instructions known, and the one ``jobkit init``
  writes equal to the template. ``text`` and ``mermaid`` are output and diagrams, not examples.

``tally`` counts each kind by reading the pages (no evaluation); docs/index.md states the counts
and tests/docs/test_examples.py holds them equal.
"""

from __future__ import annotations

import ast
import asyncio
import re
import shlex
import subprocess
import threading
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import jobkit
import pglast
import yaml
from jobkit.cli import cli
from jobkit.config import parse_settings
from jobkit.worker.drain import Drainer
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_EXAMPLES = ("text", "mermaid")  # program output and diagrams
CHECKED = ("python", "toml", "sh", "bash", "sql", "yaml", "dockerfile")  # each has an evaluator below
_OPERATORS = {"&&", "||", "|", ";", "&", "(", ")", ";;"}


def run_python(example: Example) -> None:
    source = str(example.parsed)
    ns = example.namespace
    reason = ns.pop("_compile_only", None)
    code = compile(source, f"{example.path}:{example.line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if reason is not None:  # compiled (above); its imports run, nothing else
        imports = [n for n in ast.parse(source).body if isinstance(n, ast.Import | ast.ImportFrom)]
        exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), dict(ns))
        return
    result = eval(code, ns)  # with top-level await, eval returns a coroutine
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def check_toml(example: Example) -> None:
    """jobkit.toml through jobkit's reader; another tool's file (a first line ``# fly.toml``) as TOML."""
    source = str(example.parsed)
    data = tomllib.loads(source)
    first = source.splitlines()[0] if source.strip() else ""
    if not (first.startswith("# ") and first.endswith(".toml") and first != "# jobkit.toml"):
        parse_settings(data)


_DOCKER = {"FROM", "ENV", "ARG", "WORKDIR", "COPY", "ADD", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "CMD",
           "ENTRYPOINT", "LABEL", "VOLUME", "STOPSIGNAL", "SHELL", "ONBUILD"}


def check_dockerfile(example: Example) -> None:
    """Every instruction is one Docker knows; the one `jobkit init` writes is the template as is."""
    source = str(example.parsed)
    lines = source.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            assert line.split()[0] in _DOCKER, line
    template = (ROOT / "templates" / "Dockerfile").read_text(encoding="utf-8")
    if source.splitlines()[0] == template.splitlines()[0]:
        assert source == template.replace("@JOBKIT_VERSION@", jobkit.__version__), "the guide's Dockerfile is stale"


def check_sql(example: Example) -> None:
    pglast.parse_sql(str(example.parsed))


def check_yaml(example: Example) -> None:
    documents = list(yaml.safe_load_all(str(example.parsed)))
    assert documents and all(isinstance(d, dict) for d in documents)


def check_shell(example: Example) -> None:
    source = str(example.parsed)
    done = subprocess.run(["bash", "-n"], input=source, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for words in jobkit_commands(source):
        parse_command(words)


def jobkit_commands(source: str) -> Iterator[list[str]]:
    """Each ``jobkit ...`` command of a shell block, as its words (comments and operators removed)."""
    for line in source.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        segment: list[str] = []
        for token in [*lexer, ";"]:
            if token in _OPERATORS:
                if segment and Path(segment[0]).name == "jobkit":
                    yield segment[1:]
                segment = []
            else:
                segment.append(token)


def parse_command(words: list[str]) -> None:
    """Parse ``jobkit WORDS`` with the real click tree, running nothing: unknown commands, unknown
    options and missing arguments fail as they would for a reader."""
    command: click.Command = cli
    path = ["jobkit"]
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(click.Context(command), words[0])
        assert sub is not None, f"jobkit {' '.join(path[1:] + words[:1])}: no such command"
        command, path, words = sub, [*path, words[0]], words[1:]
    try:
        # the root's settings, as the real CLI passes them down (click caches a command's help option)
        command.make_context(" ".join(path), list(words), resilient_parsing=False, **cli.context_settings)
    except click.exceptions.Exit:
        pass
    except click.UsageError as exc:
        raise AssertionError(f"{' '.join(path)} {' '.join(words)}: {exc.format_message()}") from None


def _compile_only(example: Example) -> None:
    example.namespace["_compile_only"] = example.parsed


class CompileOnlyParser:
    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer(directive="compile-only", arguments=".+?")

    def __call__(self, document: Document) -> Iterable[Region]:
        for lexed in self.lexer(document):
            yield Region(lexed.start, lexed.end, str(lexed.lexemes["arguments"]), _compile_only)


SYBIL = Sybil(parsers=[
    CompileOnlyParser(),
    SkipParser(),
    CodeBlockParser("python", run_python),
    CodeBlockParser("toml", check_toml),
    CodeBlockParser("sh", check_shell),
    CodeBlockParser("bash", check_shell),
    CodeBlockParser("sql", check_sql),
    CodeBlockParser("yaml", check_yaml),
    CodeBlockParser("dockerfile", check_dockerfile),
])


@dataclass
class Background:
    """A worker draining job types in a thread of this process, for pages whose examples wait on
    jobs (the README's tour: the worker of step 2)."""

    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def __call__(self, registry: jobkit.Registry, url: str) -> None:
        thread = threading.Thread(target=asyncio.run, args=(self._drain(registry, url),), daemon=True)
        thread.start()
        self.threads.append(thread)

    async def _drain(self, registry: jobkit.Registry, url: str) -> None:
        backend = jobkit.PostgresBackend(url)
        await backend.open()
        try:
            drainer = Drainer(registry, backend)
            while not self.stop.is_set():
                for handler in list(registry):  # a later block of the page may register more
                    await drainer.drain(handler.type)
                await asyncio.sleep(0.02)
        finally:
            await backend.close()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


# --- counting, by reading the pages -------------------------------------------------------------

_FENCE = re.compile(r"^```(\w*)[^\n]*\n.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
_INVISIBLE = re.compile(r"<!--\s*invisible-code-block:\s*python")
_MARK = re.compile(r'<!--\s*(skip: next|compile-only:)\s*"([^"]+)"\s*-->\s*\n(?=```)')


@dataclass
class Tally:
    kinds: Counter[str] = field(default_factory=Counter)  # run, validated, compiled, not runnable
    reasons: list[str] = field(default_factory=list)
    languages: Counter[str] = field(default_factory=Counter)


def tally(pages: Iterable[Path] = PAGES) -> Tally:
    out = Tally()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        marks = {m.end(): (m.group(1), m.group(2)) for m in _MARK.finditer(text)}
        for block in _FENCE.finditer(text):
            language = block.group(1) or "none"
            if language in NOT_EXAMPLES:
                continue
            out.languages[language] += 1
            mark = marks.get(block.start())
            name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
            if mark and mark[0] == "skip: next":
                out.kinds["not runnable"] += 1
                out.reasons.append(f"{name}: {mark[1]}")
            elif mark:
                out.kinds["compiled only"] += 1
                out.reasons.append(f"{name}: {mark[1]}")
            elif language not in CHECKED:
                out.kinds["unchecked"] += 1
                out.reasons.append(f"{name}: a {language} block that no evaluator checks and no mark explains")
            else:
                out.kinds["run" if language == "python" else "validated"] += 1
        out.kinds["setup"] += len(_INVISIBLE.findall(text))
    return out


def evaluate(page: Path, namespace: dict[str, Any], on_skip: Callable[[str], None]) -> int:
    """Evaluate every example of ``page`` in ``namespace``; returns how many were evaluated."""
    import unittest

    document = SYBIL.parse(page)
    document.namespace.update(namespace)
    count = 0
    for example in document.examples():
        try:
            example.evaluate()
        except unittest.SkipTest as skipped:
            on_skip(str(skipped))
        count += 1
    return count
