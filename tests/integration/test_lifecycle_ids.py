"""Ids in the lifecycle's array parameters: uuids travel as their 32 hex digits (lifecycle._uuids),
and ids a caller of the sync Lifecycle hands over as text still reach the right rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle

MIN = timedelta(minutes=1)


def test_uuids_complete_and_release_the_rows_they_name(manager: Lifecycle) -> None:
    ids = [manager.enqueue(NewJob("ids", {"i": i})) for i in range(3)]
    jobs = manager.claim("ids", 3, "w", MIN)
    first, second, third = sorted(jobs, key=lambda j: ids.index(j.id))
    assert manager.complete([(first.id, first.attempts, '{"n": 1}'), (second.id, second.attempts, None)]) \
        == {first.id, second.id}
    assert manager.release([(third.id, third.attempts)]) == {third.id}
    statuses = [getattr(manager.get(i), "status", None) for i in ids]
    assert statuses == ["completed", "completed", "pending"]


def test_text_ids_still_reach_their_rows(manager: Lifecycle) -> None:
    ids = [manager.enqueue(NewJob("ids_text", {"i": i})) for i in range(2)]
    jobs = sorted(manager.claim("ids_text", 2, "w", MIN), key=lambda j: ids.index(j.id))
    as_text: Any = [(str(j.id), j.attempts) for j in jobs]  # typed UUID; text worked before, and does
    assert manager.extend(as_text[:1], MIN) == {jobs[0].id}
    assert manager.complete([(*as_text[0], None), (jobs[1].id, jobs[1].attempts, None)]) == set(ids)
    assert [getattr(manager.get(i), "status", None) for i in ids] == ["completed", "completed"]
