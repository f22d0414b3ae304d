"""Your job handlers. Serve them with:  jobkit worker serve jobs:jobs

`jobkit dev --demo` runs these examples end to end on a local database: replace them with yours.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import jobkit
from jobkit.config import Backoff

jobs = jobkit.Registry()
_answered_429: set[Any] = set()  # stands in for the remote API's memory in this example

# A short retry curve so the demo's retries happen within seconds (the default is 30 s x 4^n).
QUICK_RETRY = Backoff(base=timedelta(seconds=1), factor=2, cap=timedelta(seconds=5), jitter=0.1)


@jobs.handler("demo.email", timeout=10)
async def send_email(payload: dict[str, Any], ctx: jobkit.JobContext) -> dict[str, Any]:
    """Succeeds. Use ctx.idempotency_key (or ctx.id) as your provider's idempotency key."""
    await asyncio.sleep(0.05)
    return {"sent_to": payload["to"], "message_id": f"msg-{ctx.id}"}


@jobs.handler("demo.flaky", timeout=10, backoff=QUICK_RETRY)
async def flaky(payload: dict[str, Any], ctx: jobkit.JobContext) -> dict[str, Any]:
    """Fails its first attempt (any exception retries with backoff), then succeeds."""
    if ctx.attempt == 1:
        raise ConnectionError("upstream timed out")
    return {"ok_on_attempt": ctx.attempt}


@jobs.handler("demo.api", timeout=10, rate_limit="demo-api")
async def call_api(payload: dict[str, Any], ctx: jobkit.JobContext) -> dict[str, Any]:
    """Takes tokens of the demo-api rate limit, shared by every worker. The API answers the first
    call for a job flagged "first_call_429" with a 429: RateLimited snoozes it, no attempt used."""
    if payload.get("first_call_429") and ctx.id not in _answered_429:
        _answered_429.add(ctx.id)
        raise jobkit.RateLimited("429 Too Many Requests", retry_after=1)
    return {"called": payload.get("n")}


@jobs.handler("demo.doomed", timeout=10, max_attempts=2, backoff=QUICK_RETRY)
def doomed(payload: dict[str, Any], ctx: jobkit.JobContext) -> None:
    """Always fails (a sync handler: it runs in a thread): retried, then dead-lettered."""
    raise ValueError(f"invalid recipient {payload.get('to')!r} (attempt {ctx.attempt})")
