"""Before and after a limits change (docs/queries.md, "Before and after a change").

For a version of the limits serve holds, every task type whose enforced limits it changed gets
two sides: the runs under the previous limits in the time before the change (since the previous
version, at most :data:`BEFORE_WINDOW` back) and the runs under the new limits from the change to
the next version (or now). Each side gives the hit rate, the completed share, task success where
runs are labelled, the mean feedback score where scored, and spend per run, with the number of
runs behind each figure. Runs are told apart by the ``loopwatch.limits.version`` they recorded,
so a run that started under the old limits after the change (an agent that had not polled yet)
counts on neither side.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from loopwatch.queries.store.limit_versions import LimitVersion, get_version

from .gateway import QueryGateway

__all__ = ["BEFORE_WINDOW", "ChangeReport", "ChangeSide", "TaskChange", "change_report"]

BEFORE_WINDOW: Final = timedelta(days=7)
"""How far back the "before" side reaches at most."""


_NUMBERS: Final = (
    "hit_rate", "completed_share", "task_success_rate", "cost_per_run", "tokens_per_run",
    "steps_per_run", "mean_score",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ChangeSide:
    """One side of a change for one task type."""

    limits_version: str
    since: datetime
    until: datetime | None
    runs: int
    hit_rate: float | None
    completed_share: float | None
    labelled: int
    """Runs with a task-success label (feedback or import)."""
    task_success_rate: float | None
    """Among labelled runs; ``None`` with none labelled."""
    scored: int
    """Runs whose feedback gave a score."""
    mean_score: float | None
    """Their mean score (``None`` with none scored). Shown, never deciding "successful"."""
    costed: int
    """Runs that recorded a cost."""
    cost_per_run: float | None
    tokens_per_run: float | None
    steps_per_run: float | None


@dataclass(frozen=True, slots=True)
class TaskChange:
    """What one change did to one task type."""

    task_type: str
    before: ChangeSide
    after: ChangeSide


@dataclass(frozen=True, slots=True)
class ChangeReport:
    """The before/after report of one limits version."""

    version: LimitVersion
    previous: LimitVersion | None
    tasks: list[TaskChange]
    """Task types whose enforced limits changed (a shadow candidate alone changes none)."""


def _side(
    gw: QueryGateway, task_type: str, version: str, since: datetime, until: datetime | None
) -> ChangeSide:
    rows = gw.run(
        "limit_change_side", task_type=task_type, limits_version=version, since=since, until=until
    ).records()
    row = rows[0] if rows else {"runs": 0, "labelled": 0, "costed": 0, "scored": 0}
    number = {k: (None if row.get(k) is None else float(row[k])) for k in _NUMBERS}
    return ChangeSide(
        limits_version=version,
        since=since,
        until=until,
        runs=int(row["runs"]),
        hit_rate=number["hit_rate"],
        completed_share=number["completed_share"],
        labelled=int(row["labelled"]),
        task_success_rate=number["task_success_rate"],
        scored=int(row["scored"]),
        mean_score=number["mean_score"],
        costed=int(row["costed"]),
        cost_per_run=number["cost_per_run"],
        tokens_per_run=number["tokens_per_run"],
        steps_per_run=number["steps_per_run"],
    )


def _task_types(gw: QueryGateway, since: datetime, *versions: LimitVersion | None) -> set[str]:
    seen = {str(r["task_type"]) for r in gw.run("task_types", since=since).records()}
    for v in versions:
        if v is not None:
            seen |= set(v.task_versions) - {"*"}
    return seen


def change_report(gw: QueryGateway, version: int) -> ChangeReport | None:
    """The before/after report of limits ``version`` (``None`` when there is no such version)."""
    con: Any = gw.con
    current = get_version(con, version)
    if current is None:
        return None
    previous = get_version(con, version - 1) if version > 1 else None
    following = get_version(con, version + 1)
    at = current.created_at
    since = max(previous.created_at, at - BEFORE_WINDOW) if previous else at - BEFORE_WINDOW
    until = following.created_at if following else None
    tasks: list[TaskChange] = []
    for task_type in sorted(_task_types(gw, since, previous, current)):
        new = current.limits_version_for(task_type)
        old = previous.limits_version_for(task_type) if previous else None
        if old == new:
            continue
        before_version = old if old is not None else _last_version_before(gw, task_type, at)
        if before_version is None or before_version == new:
            continue
        tasks.append(
            TaskChange(
                task_type,
                _side(gw, task_type, before_version, since, at),
                _side(gw, task_type, new, at, until),
            )
        )
    return ChangeReport(current, previous, tasks)


def _last_version_before(gw: QueryGateway, task_type: str, at: datetime) -> str | None:
    """The limits version the task type's runs recorded before the first served version (the
    limits agents had before they followed serve)."""
    rows = gw.run("limit_changes", until=at, task_types=[task_type]).records()
    return str(rows[-1]["limits_version"]) if rows else None
