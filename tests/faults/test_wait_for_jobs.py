"""ctx.wait_for_jobs under concurrency (issue 25): 200 parents, each of which starts 5 children in a
durable step and waits for them (ctx.wait_for_jobs), run by two real `jobkit worker serve --listen`
processes at once. About a quarter of the children fail for good. The children finish while their
parents are still registering their waits, so both orders happen (the report line counts them): a
parent whose children have all finished is resumed by its own suspension, the others by the
finishing of their last child.

No sweep runs (no ticker): a resolution that got lost would leave its parent waiting, and the test
would time out. Every parent resumes exactly once (one wait, two runs, one completion) with the
right outcome of each child, every child ran once, and nothing is left waiting (by query)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import psycopg
from faultkit import count, exactly_once, prepare
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from poll import wait_for
from workers import Worker

PARENTS = 200
CHILDREN = 5
BATCH = 10


def test_parents_waiting_for_their_children_resume_once_with_their_outcomes(
    fault_url: str, workers: Callable[..., Worker]
) -> None:
    url = fault_url
    prepare(url)
    rng = random.Random(25)
    plans = [[{"type": "fault.child", "payload": {"n": n, "fail": rng.random() < 0.25,
                                                  "seconds": rng.choice([0, 0, 0.005, 0.02])}}
              for n in range(CHILDREN)] for _ in range(PARENTS)]
    pauses = [rng.choice([0, 0, 0.02, 0.1, 0.3]) for _ in range(PARENTS)]  # between starting and awaiting them
    for _ in range(2):
        workers(url, "--concurrency", "8", "--listen")
    parents = []
    with Database(url).session() as s:  # in batches, a little apart: the children's queue stays short
        for i in range(0, PARENTS, BATCH):
            parents += Lifecycle(s).enqueue_many([NewJob("fault.parent", {"children": plan, "pause": pause})
                                                  for plan, pause in zip(plans[i:i + BATCH], pauses[i:i + BATCH],
                                                                         strict=True)])
            time.sleep(0.1)
    took = wait_for(lambda: count(url, "type = 'fault.parent' and status = 'completed'") == PARENTS, 90,
                    "every parent resuming")
    with psycopg.connect(url, autocommit=True) as conn:
        children = conn.execute("select (payload ->> 'parent')::uuid, (payload ->> 'n')::int, id, status"
                                " from jobkit.jobs where type = 'fault.child'").fetchall()
        results = dict(conn.execute("select id, result from jobkit.jobs where type = 'fault.parent'").fetchall())
        waited = dict(conn.execute("select job_id, count(*) from jobkit.job_attempts where outcome = 'waited'"
                                   " group by 1").fetchall())
        waits = dict(conn.execute("select job_id, count(*) from jobkit.job_steps where kind = 'wait'"
                                  " group by 1").fetchall())
        left = conn.execute("select status, count(*) from jobkit.jobs where status not in ('completed', 'failed')"
                            " group by 1").fetchall()
        assert conn.execute("select count(*) from jobkit.job_waits").fetchone() == (0,)
        at_once = conn.execute(  # resolved by its own suspension: in the same transaction
            "select count(*) from jobkit.job_steps s join jobkit.job_attempts a on a.job_id = s.job_id"
            " and a.outcome = 'waited' where s.kind = 'wait' and s.finished_at = a.finished_at").fetchone()
    assert left == []  # nothing waiting, pending or running
    mine: dict[object, dict[int, tuple[str, str]]] = {p: {} for p in parents}
    for parent, n, child, status in children:
        mine[parent][n] = (str(child), status)
    assert len(children) == PARENTS * CHILDREN and all(len(c) == CHILDREN for c in mine.values())  # spawned once
    failing = sum(c["payload"]["fail"] for plan in plans for c in plan)
    for parent, plan in zip(parents, plans, strict=True):
        want = {mine[parent][n][0]: "failed" if c["payload"]["fail"] else "completed" for n, c in enumerate(plan)}
        assert {child: status for child, status in mine[parent].values()} == want
        assert results[parent] == want  # what ctx.wait_for_jobs returned to it
    assert waited == dict.fromkeys(parents, 1) and waits == dict.fromkeys(parents, 1)  # each resumed once
    verdict = exactly_once(url, parents)  # one completion each, and a side effect per run
    assert verdict.completed == PARENTS and verdict.runs == dict.fromkeys(parents, 2)
    child_runs = exactly_once(url, [row[2] for row in children]).runs
    assert child_runs == {row[2]: 1 for row in children}
    print(f"[faults] ctx.wait_for_jobs: {PARENTS} parents x {CHILDREN} children ({failing} failing for good), "
          f"two workers: every parent resumed once with its children's outcomes ({at_once[0]} by their own "
          f"suspension, their children all finished; the rest by their last child), {took:.1f}s")
