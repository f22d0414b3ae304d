"""`jobkit triggers list` and doctor's row-trigger check: the row triggers deploy manages
([triggers.<name>] in jobkit.toml, issue 24), as the database has them."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Settings
from ..connector import Database, Session
from ..queries import queries
from ..schema.triggers import deployed
from ..triggerspec import OPERATIONS


@dataclass(frozen=True)
class TriggerRow:
    """One managed row trigger: its declaration, its state, and its jobs of the last hour."""

    name: str
    table: str
    events: tuple[str, ...]
    condition: str | None
    type: str | None  # the job type it makes; None for an emit trigger
    state: str  # ok / dropped / disabled / altered
    jobs_last_hour: int  # jobs it made (an emit trigger makes events, not jobs: 0)
    emit: str | None = None  # the event name an emit trigger emits
    events_last_hour: int | None = None  # an emit trigger: events of its name emitted (by anyone)

    @property
    def target(self) -> str:
        """What it makes, for a table: the job type, or ``event <name>``."""
        return f"event {self.emit}" if self.emit is not None else str(self.type)

    @property
    def made(self) -> str:
        """Its last hour, for a table: jobs, or an emit trigger's events."""
        return str(self.jobs_last_hour) if self.emit is None else f"{self.events_last_hour} events"


def list_triggers(db: Database, settings: Settings) -> list[TriggerRow]:
    with db.session() as session:
        return rows(session, settings)


def rows(session: Session, settings: Settings) -> list[TriggerRow]:
    """One row per declared trigger (its operations folded together), in name order."""
    q = queries(settings.schema)
    counts = {r["name"]: int(r["jobs"]) for r in session.all(q["row_trigger_jobs"])}
    by_name: dict[str, list[dict[str, object]]] = {}
    for row in deployed(session, settings):
        by_name.setdefault(str(row["name"]), []).append(row)
    specs = [ops[0]["spec"] for ops in by_name.values()]
    emits = sorted({str(s["emit"]) for s in specs if isinstance(s, dict) and s.get("emit")})
    events = {r["name"]: int(r["events"]) for r in session.all(q["row_trigger_events"], {"names": emits})} \
        if emits else {}
    out = []
    for name, ops in sorted(by_name.items()):
        ops.sort(key=lambda op: OPERATIONS.index(str(op["op"])))
        spec = ops[0]["spec"]
        assert isinstance(spec, dict)
        states = [_state(op) for op in ops]
        worst = next((s for s in ("dropped", "disabled", "altered") if s in states), "ok")
        emit = spec.get("emit")
        out.append(TriggerRow(name=name, table=str(spec["table"]), events=tuple(str(op["op"]) for op in ops),
                              condition=spec.get("when"), type=spec.get("type"), state=worst,
                              jobs_last_hour=counts.get(name, 0), emit=emit,
                              events_last_hour=None if emit is None else events.get(emit, 0)))
    return out


def _state(row: dict[str, object]) -> str:
    if not row["present"]:
        return "dropped"
    if not row["enabled"]:
        return "disabled"
    return "ok" if row["hash"] == row["definition"] else "altered"


def problems(session: Session, settings: Settings) -> list[str]:
    """Every managed trigger that is not there and enabled as deploy left it (doctor)."""
    return [f"{r['trigger_name']} on {r['table_name']} ({r['name']}, {r['op']}): {_state(r)}"
            for r in deployed(session, settings) if _state(r) != "ok"]
