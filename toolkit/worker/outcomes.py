"""What a drain produced: its summary, a handler's result encoded once, and failures ready to record."""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any
from uuid import UUID

from ..jobs import Claimed, Failure
from ..retries import Permanent, Retry
from .attempt import Outcome
from .handler import Handler

MAX_ERROR = 8000
#: Larger than this, a result cannot be stored (PostgreSQL's jsonb values end at 255 MB).
MAX_RESULT_BYTES = 255 * 1024 * 1024
_encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
_encode = _encoder.encode
#: CPython's C encoder with _encoder's settings, made once: JSONEncoder.encode builds one per call
#: (about half of encoding a small dict). No circular-reference markers (shared by threads: sync
#: handlers encode in theirs); a cycle ends in RecursionError, and then _encode says what it is.
_c_encode: Any = None if c_make_encoder is None else c_make_encoder(
    None, _encoder.default, encode_basestring_ascii, None, ":", ",", False, False, False)


@dataclass
class DrainSummary:
    """What one drain did."""

    type: str
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    snoozed: int = 0
    waited: int = 0  # ended in a wait (ctx.sleep & co): the job waits, holding no worker
    released: int = 0
    lost: int = 0  # fenced out: the attempt no longer held the job when it finished
    cancelled: int = 0  # cancelled while this worker held them (cancel_job): nothing recorded
    ended: str = "empty"  # empty | budget | max_jobs | stopping | unreachable

    def count(self, outcome: Outcome, n: int = 1) -> None:
        """Count ``n`` attempts that ended in ``outcome`` (a retry counts as failed)."""
        if outcome is Outcome.UNRECORDED:  # not counted: its lease expires and the sweep retries it
            return
        name = "failed" if outcome is Outcome.RETRY else outcome.value
        setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def encode_result(value: Any) -> str | None:
    """The handler's result as JSON text (None for None), or Permanent when it cannot be stored."""
    if value is None:
        return None
    try:
        text = _encode(value) if _c_encode is None else _encoded(value)
    except TypeError:
        text = _encode_uuid_keys(value)
    except ValueError as exc:
        raise Permanent(f"the handler's result is not JSON-serializable: {exc}") from None
    if len(text) > MAX_RESULT_BYTES:
        raise Permanent(f"the handler's result is {len(text) / 2**20:.0f} MB of JSON; "
                        f"PostgreSQL stores at most {MAX_RESULT_BYTES // 2**20} MB")
    return text


def _encoded(value: Any) -> str:
    """``_encode(value)`` by the prebuilt C encoder; a RecursionError (a cycle, or nesting too deep)
    is asked of _encode again, which names a cycle as such (ValueError)."""
    try:
        return "".join(_c_encode(value, 0))
    except RecursionError:
        return _encode(value)


def _encode_uuid_keys(value: Any) -> str:
    """The slow path, taken only when the fast encoder refused: dict keys that are UUIDs (as
    ``ctx.wait_for_jobs`` returns, {job id: status}) become their text; anything else still
    unencodable is Permanent."""
    try:
        return _encode(_str_keys(value))
    except (TypeError, ValueError) as exc:
        raise Permanent(f"the handler's result is not JSON-serializable: {exc}") from None


def _str_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k) if isinstance(k, UUID) else k: _str_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_str_keys(v) for v in value]
    return value


def failure(job: Claimed, handler: Handler | None, error: BaseException) -> Failure:
    text = error_text(error)
    if isinstance(error, Permanent):
        return Failure(job.id, job.attempts, text, permanent=True)
    retry_in = (
        error.after if isinstance(error, Retry) else (handler.retry_delay(job.attempts) if handler else None)
    )
    return Failure(job.id, job.attempts, text, retry_in=retry_in)


def error_text(error: BaseException) -> str:
    """The traceback (or the message), shortened, as text PostgreSQL can store."""
    if error.__traceback__ is None:
        text = f"{type(error).__name__}: {error}"
    else:
        text = "".join(traceback.format_exception(error))
    if len(text) > MAX_ERROR:
        text = text[: MAX_ERROR // 2] + "\n...\n" + text[-MAX_ERROR // 2 :]
    return storable(text)


def storable(text: str) -> str:
    """``text`` without what a text column refuses: NUL becomes \\x00, lone surrogates \\udXXX."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode()
    return text


def last_line(error: str | None) -> str:
    """The exception's own line of a stored traceback (its last non-empty line)."""
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
