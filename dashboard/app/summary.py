"""Small judgements the pages share: which verdict speaks for a task type, how an alert reads,
when the alert fired in a window. Pure functions over the analysis and query results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from loopwatch.queries.analysis.alerts import AlertState, AlertThresholds
from loopwatch.queries.analysis.recommendations import LimitAnalysis

from .theme import VERDICT_RANK, fmt_pct

__all__ = [
    "FiringSpan",
    "alert_sentence",
    "firing_spans",
    "lead_verdicts",
]


def lead_verdicts(analyses: Sequence[LimitAnalysis]) -> dict[str, LimitAnalysis]:
    """Per task type, the analysis whose verdict matters most (stuck, then too tight, too loose,
    ok, not enough data); budgets whose limit is off do not count."""
    out: dict[str, LimitAnalysis] = {}
    for a in analyses:
        if a.verdict is None:
            continue
        best = out.get(a.task_type)
        if best is None or VERDICT_RANK[a.verdict] < VERDICT_RANK[best.verdict or "ok"]:
            out[a.task_type] = a
    return out


def alert_sentence(a: AlertState, t: AlertThresholds) -> str:
    """One line for a firing (or not) repeated_error alert, plain text."""
    return (
        f"{a.task_type}: {fmt_pct(a.ratio_short)} of runs in the last {t.short_window} stopped on "
        f"repeated_error ({a.repeated_short:,} of {a.runs_short:,}), against "
        f"{fmt_pct(a.ratio_baseline)} over {t.baseline_window}."
    )


class FiringSpan(tuple[str, datetime, datetime, bool]):
    """``(task_type, start, end, still_firing)``."""

    __slots__ = ()

    @property
    def task_type(self) -> str:
        return self[0]

    @property
    def start(self) -> datetime:
        return self[1]

    @property
    def end(self) -> datetime:
        return self[2]

    @property
    def ongoing(self) -> bool:
        return self[3]


def firing_spans(history: Sequence[Mapping[str, Any]]) -> list[FiringSpan]:
    """Where ``repeated_error_alert_history`` rows fired, merged into spans per task type, in
    order of start."""
    by_type: dict[str, list[Mapping[str, Any]]] = {}
    for r in history:
        by_type.setdefault(str(r["task_type"]), []).append(r)
    spans: list[FiringSpan] = []
    for t, rows in by_type.items():
        rows = sorted(rows, key=lambda r: r["evaluated_at"])
        start: datetime | None = None
        end: datetime | None = None
        for r in rows:
            if r["firing"]:
                start = start or r["evaluated_at"]
                end = r["evaluated_at"]
            elif start is not None and end is not None:
                spans.append(FiringSpan((t, start, end, False)))
                start = end = None
        if start is not None and end is not None:
            spans.append(FiringSpan((t, start, end, True)))
    return sorted(spans, key=lambda s: s.start)
