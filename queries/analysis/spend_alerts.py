"""The spend alert evaluated on the store (docs/queries.md, "Alerts"): the same rule and the same
thresholds (:class:`~loopwatch.queries.analysis.alerts.AlertThresholds`) as the PromQL alert
``LoopwatchSpendPerRunRising``, through the ``spend_alert`` named query.

Spend per run, not spend per minute: a task type that gets twice the traffic spends twice as much
and is healthy; one whose runs each cost twice as much is looping longer or on a pricier model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .alerts import AlertThresholds
from .gateway import parse_duration, run_query

__all__ = ["SpendAlertState", "spend_alerts"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SpendAlertState:
    """The spend alert for one task type."""

    task_type: str
    runs_short: int
    """Runs that recorded a cost in the short window."""
    per_run_short: float | None
    runs_baseline: int
    per_run_baseline: float
    firing: bool


def spend_alerts(
    con: Any,
    *,
    now: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AlertThresholds | None = None,
) -> list[SpendAlertState]:
    """``LoopwatchSpendPerRunRising`` evaluated at ``now`` (default: now, UTC), one state per
    task type with costed runs in the baseline window, firing ones first; ``thresholds``:
    default ``AlertThresholds()``."""
    t = thresholds or AlertThresholds()
    res = run_query(
        con,
        "spend_alert",
        {
            "now": now,
            "task_types": task_types,
            "short_window_s": parse_duration(t.short_window).total_seconds(),
            "baseline_window_s": parse_duration(t.baseline_window).total_seconds(),
            "factor": t.spend_factor,
            "min_runs": t.min_runs,
        },
        max_rows=1_000_000,
    )
    return [
        SpendAlertState(
            task_type=str(r["task_type"]),
            runs_short=int(r["runs_short"]),
            per_run_short=None if r["per_run_short"] is None else float(r["per_run_short"]),
            runs_baseline=int(r["runs_baseline"]),
            per_run_baseline=float(r["per_run_baseline"]),
            firing=bool(r["firing"]),
        )
        for r in res.records()
    ]
