"""The spend-rate stop in ``loopwatch report``: its entry per task type and its block of text
(one block, apart from the per-limit tables; docs/queries.md, "Spend rate")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loopwatch.dashboard.cli.text import clean, num, pct, table
from loopwatch.queries.analysis.columnar import QueryColumns
from loopwatch.queries.analysis.rates import RunRates
from loopwatch.queries.analysis.recommend import TaskFit, file_summary
from loopwatch.queries.analysis.recommendations import AnalysisThresholds, LimitAnalysis
from loopwatch.queries.analysis.spend_rate import spend_rate_advice

__all__ = ["spend_rate_entries", "spend_rate_lines"]


def spend_rate_entries(
    con: Any,
    analyses: Sequence[LimitAnalysis],
    fits: Mapping[str, TaskFit],
    window: Mapping[str, Any],
    thresholds: AnalysisThresholds,
    *,
    usage: QueryColumns | None = None,
    rates: RunRates | None = None,
) -> dict[str, dict[str, Any]]:
    """Task type → its spend-rate advice as data (``SpendRateAdvice.to_dict``; the file it
    would sit in as ``file_summary`` words where that is not the report's file). ``usage``: the
    window's successful runs, as the report read them for its fits; ``rates``: the window's run
    rates (``run_rates``), read when not given."""
    on: dict[str, list[str]] = {}
    for a in analyses:
        on.setdefault(a.task_type, [])
        if a.current_limit is not None:
            on[a.task_type].append(a.budget)
    advice = spend_rate_advice(con, on, **window, thresholds=thresholds, fits=fits, usage=usage,
                               rates=rates)  # fmt: skip
    out = {}
    for one in advice:
        d = one.to_dict()
        file = d.pop("file")
        d["file_summary"] = None if one.in_file else file_summary(file)
        out[one.task_type] = d
    return out


def spend_rate_lines(report: Mapping[str, Any]) -> list[str]:
    """The report's spend-rate block: per task type, the stop's value, promise and what it would
    have cut short; nothing when no task type has an entry."""
    entries = [e["spend_rate"] for e in report["task_types"] if e.get("spend_rate")]
    if not entries:
        return []
    lines = [
        "",
        "Spend-rate stop (max_cost_per_min, off by default; each run's highest spend a minute, "
        "time counted as at least a minute; fit with the file's other limits)",
    ]
    rows = [
        [
            clean(d["task_type"]),
            d["field"] or "-",
            num(d["current"]) if d["current"] is not None else "off",
            num(d["recommended"]) + (f" {d['unit']}" if d["recommended"] is not None else ""),
            f"{d['successful_runs']:,}",
            pct(d["observed_cut_share"]),
            pct(d["backtest_cut_share"]),
            f"{d['failed_faster']:,}/{d['failed_runs']:,}",
            f"{d['rate_stops']:,}",
        ]
        for d in entries
    ]
    lines += table(
        ["task type", "limit", "current", "recommended", "successful runs", "cuts (fit)",
         "cuts (back-test)", "failed runs faster", "stopped by it"],
        rows,
    )  # fmt: skip
    for d in entries:
        text = f"  {clean(d['task_type'])}: {clean(d['promise'])}."
        if d["recommended"] is not None and not d["in_file"]:
            text += (
                " Off now: `report --spend-rate` fits the file with it and --format toml writes "
                f"it (that file: {clean(d['file_summary'] or '-')})."
            )
        lines.append(text)
    return lines
