"""A recommended spend-rate stop per task type (docs/queries.md, "Spend rate").

The stop is for runs that burn money faster than any successful run did: the recommendation is
the fastest successful run's spend a minute (measured as the guard measures it: over the run's
wall time, at least a minute) with the margin of the other recommendations, and none — with how
many are needed — while fewer than ``min_runs`` successful runs recorded their cost and time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from .gateway import QueryGateway

__all__ = ["MARGIN", "MIN_RUNS", "SpendRateAdvice", "spend_rate_advice"]

MARGIN: Final = 0.25
"""Above the fastest successful run (as the other recommendations' margin)."""
MIN_RUNS: Final = 30
"""Successful runs with cost and time needed before a value is recommended."""


@dataclass(frozen=True, slots=True)
class SpendRateAdvice:
    """The spend-rate recommendation for one task type."""

    task_type: str
    successful_runs: int
    fastest_usd_per_min: float | None
    max_cost_per_min: float | None
    """The value to set (``None``: too few runs; see ``runs_needed``)."""
    runs_needed: int | None
    failed_faster: int
    """Runs that did not succeed and spent faster than the fastest successful run."""


def spend_rate_advice(
    gw: QueryGateway,
    *,
    since: datetime | None = None,
    task_types: list[str] | None = None,
    min_runs: int = MIN_RUNS,
) -> list[SpendRateAdvice]:
    """One recommendation per task type with costed runs in the window."""
    rows: list[dict[str, Any]] = gw.run("spend_rate", since=since, task_types=task_types).records()
    out = []
    for r in rows:
        n = int(r["successful_costed"])
        fastest = None if r["max_cost_rate"] is None else float(r["max_cost_rate"])
        enough = n >= min_runs and fastest is not None and fastest > 0
        out.append(
            SpendRateAdvice(
                task_type=str(r["task_type"]),
                successful_runs=n,
                fastest_usd_per_min=fastest,
                max_cost_per_min=round(fastest * (1 + MARGIN), 6) if enough and fastest else None,
                runs_needed=None if enough else max(min_runs - n, 1),
                failed_faster=int(r["failed_faster"] or 0),
            )
        )
    return out
