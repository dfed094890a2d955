"""Limit analysis (docs/queries.md): recommendations, verdicts, what-if curves and detector replay.

Every number comes from a named query run through the gateway (``limit_stats``,
``what_if``, ``usage_distribution``, ``detector_replay``); this module only applies the
thresholds of :class:`AnalysisThresholds` and words the result.

Definitions (the docs, ``docs/queries.md``, repeat them):

* A run is *successful* when its task is labelled successful (``task_success``, set by
  ``loopwatch import`` or feedback), whatever ended its loop; without a label, when its loop
  completed (``gateway.SUCCESSFUL_RUN_SQL``, the one definition every query uses).
* A run *hit* a budget's limit when its outcome is ``limit`` and its ``limit_name`` (or,
  when missing, the budget its stop reason uses up) is that budget.
* The *current* limit of a (task type, budget) is the value the task type's latest run in the
  window ran under. Hit rates and progress evidence count only runs under that same value, so
  a limit that was just raised is judged on the runs that ran under it.
* A stopped run was *still making progress* when its last ``PROGRESS_WINDOW`` (3) steps brought
  at least ``progress_min_new_calls`` (1) call fingerprints not seen before in the run
  (``runs.recent_new_calls``) and no error fingerprint occurred more than
  ``progress_max_same_error`` (1) times in it (``runs.max_same_error``): i.e.
  ``recent_new_calls > 0 AND max_same_error < 2`` by default. Runs without that evidence
  (NULL) count neither way. Otherwise it was *looping*.
* Recommended value: the task type's limits file (limits that are on, detector thresholds the
  replay measured) fit together so that the whole file cuts at most ``cut_target`` of successful
  runs with ``confidence`` (:mod:`loopwatch.queries.analysis.guarantee`); with too few successful
  runs, no value and how many are needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import Any

from loopwatch.instrumentation.runtime.outcomes import UNKNOWN_ERROR
from loopwatch.instrumentation.runtime.replay import RecordedStep, replay_peaks
from loopwatch.instrumentation.runtime.semconv import BUDGETS
from loopwatch.instrumentation.runtime.toolspec import ToolOutcome
from loopwatch.instrumentation.runtime.types import ToolCall

from .columnar import QueryColumns
from .gateway import run_query
from .rates import rate_items_on
from .recommend import TaskFit, fit_limits
from .verdict_types import (
    BUDGET_FIELDS,
    AnalysisThresholds,
    Evidence,
    LimitAnalysis,
    Verdict,
    opt_float,
    round_up,
)
from .verdicts import judge, promise_text

__all__ = [
    "BUDGET_FIELDS",
    "AnalysisThresholds",
    "DetectorReplay",
    "Evidence",
    "LimitAnalysis",
    "Verdict",
    "WhatIfPoint",
    "analyze_file",
    "analyze_limits",
    "default_candidates",
    "judge",
    "promise_text",
    "replay_detectors",
    "round_up",
    "what_if",
]


def analyze_file(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    include_off: bool = False,
    timeout_s: float | None = None,
    spend_rate: bool = False,
    usage: QueryColumns | None = None,
) -> tuple[list[LimitAnalysis], dict[str, TaskFit]]:
    """:func:`analyze_limits` and the recommended file per task type it rests on (its promise,
    the whole file's cut share and its back-test), holding the spend-rate stop where serve's
    limits have it on, or with ``spend_rate`` (docs/queries.md, "Spend rate"). ``usage``: the
    window's successful runs when already read (``recommend.read_usage`` of the same window)."""
    res = run_query(
        con,
        "limit_stats",
        {
            "since": since,
            "until": until,
            "task_types": task_types,
            "quantile": thresholds.quantile,
            "progress_min_new_calls": thresholds.progress_min_new_calls,
            "progress_max_same_error": thresholds.progress_max_same_error,
        },
        max_rows=1_000_000,
        timeout_s=timeout_s,
    )
    rows = res.records()
    on: dict[str, list[str]] = {}
    for row in rows:
        if row["current_limit"] is not None:
            on.setdefault(str(row["task_type"]), []).append(str(row["budget"]))
    for task_type, rate in rate_items_on(con, {r["task_type"] for r in rows}, spend_rate).items():
        on.setdefault(task_type, []).extend(rate)
    fits = fit_limits(
        con,
        on,
        since=since,
        until=until,
        task_types=task_types,
        target=thresholds.cut_target,
        confidence=thresholds.confidence,
        cost_resolution_usd=thresholds.cost_resolution_usd,
        timeout_s=timeout_s,
        usage=usage,
    )
    out = [judge(row, thresholds, fits.get(str(row["task_type"]))) for row in rows]
    return [a for a in out if include_off or a.current_limit is not None], fits


def analyze_limits(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    include_off: bool = False,
    timeout_s: float | None = None,
) -> list[LimitAnalysis]:
    """Verdicts and recommendations per (task type, budget) for the runs in the window.

    Budgets whose limit is off have no verdict; they are left out unless ``include_off``.
    """
    return analyze_file(con, since=since, until=until, task_types=task_types, thresholds=thresholds,
                        include_off=include_off, timeout_s=timeout_s)[0]  # fmt: skip


# --- what-if -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class WhatIfPoint:
    """What one candidate limit value would have done to the window's runs."""

    candidate: float
    successful_runs: int
    successful_cut: int
    """Successful runs whose usage was above the candidate."""
    cut_share: float | None
    failed_runs: int
    """Runs that did not succeed (with this usage recorded)."""
    stopped_earlier: int
    """Of those, runs whose usage was above the candidate."""
    failed_spend: float
    saved_spend: float
    """Sum over failed runs of spend × (1 − candidate / usage) where usage > candidate (spend
    assumed to grow in proportion to the budget's usage)."""
    saved_share: float | None
    spend_measure: str
    """``cost_usd``, or ``tokens`` when the failed runs recorded no cost."""


def default_candidates(
    con: Any,
    task_type: str,
    budget: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    points: int = 20,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
) -> list[float]:
    """``points`` evenly spaced values from one resolution step to 1.25 × the largest usage seen
    (or the current limit, if larger), rounded up to the budget's resolution."""
    (row,) = run_query(
        con,
        "usage_range",
        {"task_type": task_type, "budget": budget, "since": since, "until": until},
    ).records()
    hi = max(float(row["max_used"] or 0.0), float(row["current_limit"] or 0.0))
    res = thresholds.resolution(budget)
    if hi <= 0:
        return [res]
    top = hi * 1.25
    vals = {round_up(max(res, top * i / points), res) for i in range(1, points + 1)}
    return sorted(vals)


def what_if(
    con: Any,
    task_type: str,
    budget: str,
    candidates: Sequence[float] | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    points: int = 20,
) -> list[WhatIfPoint]:
    """For each candidate value of ``budget``: successful runs it would have cut and spend it
    would have saved on runs that did not succeed. Candidates default to
    :func:`default_candidates`."""
    if candidates is None:
        candidates = default_candidates(
            con, task_type, budget, since=since, until=until, points=points
        )
    res = run_query(
        con,
        "what_if",
        {
            "task_type": task_type,
            "budget": budget,
            "candidates": list(candidates),
            "since": since,
            "until": until,
        },
    )
    return [
        WhatIfPoint(
            candidate=float(r["candidate"]),
            successful_runs=int(r["successful_runs"]),
            successful_cut=int(r["successful_cut"]),
            cut_share=opt_float(r["cut_share"]),
            failed_runs=int(r["failed_runs"]),
            stopped_earlier=int(r["stopped_earlier"]),
            failed_spend=float(r["failed_spend"]),
            saved_spend=float(r["saved_spend"]),
            saved_share=opt_float(r["saved_share"]),
            spend_measure=str(r["spend_measure"]),
        )
        for r in res.records()
    ]


# --- detector replay ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class DetectorReplay:
    """How one detector threshold would have treated the window's runs of one task type."""

    task_type: str
    detector: str
    """``repeated_tool_call``, ``repeated_error``, ``repeated_action``, ``tool_failures`` or
    ``no_progress``."""
    threshold: int
    successful_runs: int
    false_stops: int
    """Successful runs it would have stopped."""
    false_stop_share: float | None
    failed_runs: int
    caught: int
    """Runs that did not succeed that it would have stopped (at or before their end)."""
    caught_share: float | None
    suggested: bool
    """True on the smallest threshold whose false-stop share is at most ``false_stop_target``."""


def replay_detectors(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    max_threshold: int = 10,
    thresholds: AnalysisThresholds = AnalysisThresholds(),
    from_spans: bool = True,
    timeout_s: float | None = None,
    max_spans: int = 5_000_000,
) -> list[DetectorReplay]:
    """Replay the detectors on history for thresholds 2..max_threshold (docs/queries.md,
    "Detector replay").

    With ``from_spans`` (the default) every run's tool spans are fed, in order, to the guard's
    own detector objects (:func:`~loopwatch.instrumentation.runtime.detectors.replay_peaks`):
    all five
    detectors, judged by the rules that run live. A detector with threshold N stops a run whose
    peak evidence reached N; ``repeated_action`` has no threshold, its peak is the longest streak
    of one (call, result) in a row (the guard stops at 2). Reads every tool span in the window
    (query ``detector_replay_spans``); more than ``max_spans`` rows raise ``ValueError``.

    ``from_spans=False`` reads only the counts the guard recorded on each run (query
    ``detector_replay``): ``repeated_tool_call`` and ``repeated_error``, censored above the
    thresholds the runs ran with.
    """
    params: dict[str, Any] = {
        "since": since,
        "until": until,
        "task_types": task_types,
    }
    if from_spans:
        rows = _replay_spans(con, params, max_threshold, max_spans, timeout_s)
    else:
        params["max_threshold"] = max_threshold
        rows = run_query(
            con, "detector_replay", params, max_rows=1_000_000, timeout_s=timeout_s
        ).records()
    rows.sort(key=lambda r: (r["task_type"], r["detector"], r["threshold"]))
    suggested: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["task_type"], r["detector"])
        share = r["false_stop_share"]
        if key not in suggested and share is not None and share <= thresholds.false_stop_target:
            suggested[key] = int(r["threshold"])
    return [
        DetectorReplay(
            task_type=r["task_type"],
            detector=r["detector"],
            threshold=int(r["threshold"]),
            successful_runs=int(r["successful_runs"]),
            false_stops=int(r["false_stops"]),
            false_stop_share=opt_float(r["false_stop_share"]),
            failed_runs=int(r["failed_runs"]),
            caught=int(r["caught"]),
            caught_share=opt_float(r["caught_share"]),
            suggested=suggested.get((r["task_type"], r["detector"])) == int(r["threshold"]),
        )
        for r in rows
    ]


def _recorded_steps(events: Sequence[tuple[Any, ...]]) -> list[RecordedStep]:
    # Steps between the first and the last step with a tool call that have none are idle steps.
    # The one tool-call record, fingerprints standing for the arguments and the result; rows of
    # detector_replay_spans as tuples (a dict per tool span cost more than the record).
    by_step: dict[int, list[ToolOutcome]] = {}
    for _run, _task, _ok, step, tool, fp, res, err, code, error_fp in events:
        if step is not None:
            by_step.setdefault(int(step), []).append(
                ToolOutcome(
                    call=ToolCall("", tool, fp),
                    ok=not err,
                    content=res,
                    error_code=(code or UNKNOWN_ERROR) if err else None,
                    error_message="",
                    error_fingerprint=error_fp if err else None,
                )
            )
    if not by_step:
        return []
    return [RecordedStep(i, by_step.get(i, ())) for i in range(min(by_step), max(by_step) + 1)]


def _replay_spans(
    con: Any,
    params: Mapping[str, Any],
    max_threshold: int,
    max_spans: int,
    timeout_s: float | None,
) -> list[dict[str, Any]]:
    if not 2 <= max_threshold <= 100:
        raise ValueError(f"max_threshold must be between 2 and 100, got {max_threshold!r}")
    res = run_query(con, "detector_replay_spans", params, max_rows=max_spans, timeout_s=timeout_s)
    if res.truncated:
        raise ValueError(
            f"more than {max_spans} tool spans in the window: narrow it (since/until, "
            "task_types) or raise max_spans"
        )
    # (task type, detector) -> [successful peaks, other peaks]
    peaks: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for (_run, task_type, ok), events in groupby(res.rows, key=lambda r: (r[0], r[1], bool(r[2]))):
        # fingerprints were normalized when recorded
        steps = _recorded_steps(list(events))
        for detector, peak in replay_peaks(steps, normalize=False).items():
            pair = peaks.setdefault((task_type, detector), ([], []))
            pair[0 if ok else 1].append(peak)
    rows: list[dict[str, Any]] = []
    for (task_type, detector), (good, bad) in peaks.items():
        for n in range(2, max_threshold + 1):
            false_stops = sum(1 for p in good if p >= n)
            caught = sum(1 for p in bad if p >= n)
            rows.append(
                {
                    "task_type": task_type,
                    "detector": detector,
                    "threshold": n,
                    "successful_runs": len(good),
                    "false_stops": false_stops,
                    "false_stop_share": false_stops / len(good) if good else None,
                    "failed_runs": len(bad),
                    "caught": caught,
                    "caught_share": caught / len(bad) if bad else None,
                }
            )
    return rows


assert set(BUDGET_FIELDS) == set(BUDGETS)
