"""What imported history says about limits (docs/import.md): the replay of a limits file and
each detector's false-stop rate, read from the runs ``loopwatch import`` stored.

* :func:`imported_replay`: per task type, what the limits the runs were replayed under would
  have done — runs of successful tasks they would have cut, runs of failed tasks they would
  have stopped earlier, the spend that would have saved — and the stops by reason
  (``import_replay``).
* :func:`detector_thresholds`: per task type and detector, the share of runs of successful
  tasks each threshold would have stopped (false stops) and of failed tasks it would have
  caught, and the smallest threshold keeping false stops at or under a target
  (``import_detectors``).

A run belongs to a *successful task* when its conversation's label is true; an unlabeled run
counts as successful when its loop completed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from .gateway import run_query

__all__ = [
    "DETECTOR_FIELDS",
    "ERROR_DETECTORS",
    "DetectorThreshold",
    "ErrorClassification",
    "ImportedReplay",
    "ReplayStop",
    "ShadowEvaluation",
    "detector_thresholds",
    "error_classification",
    "imported_replay",
    "shadow_evaluations",
]

DETECTOR_FIELDS: Final[dict[str, str | None]] = {
    "repeated_action": None,
    "repeated_tool_call": "max_same_call",
    "repeated_error": "max_same_error",
    "tool_failures": "max_consecutive_failures",
    "no_progress": "max_idle_turns",
}
"""Detector → the ``LoopLimits`` field setting its threshold (``repeated_action``'s rule is
fixed: it stops at the second identical (call, result) in a row)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayStop:
    """Runs the replay would have stopped with one reason."""

    reason: str
    runs: int
    successful_task_runs: int
    failed_task_runs: int
    median_step: float | None
    """The median step of the would-be stop."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportedReplay:
    """What the replayed limits would have done to one task type's imported runs."""

    task_type: str
    runs: int
    limits_versions: tuple[str, ...]
    """The versions (hashes) of the limits the runs were replayed under."""
    successful_task_runs: int
    successful_cut: int
    """Runs of successful tasks the limits would have stopped (false cuts)."""
    failed_task_runs: int
    failed_stopped: int
    """Runs of failed tasks the limits would have stopped before their recorded end."""
    spend_measure: str
    """``tokens``, or ``model_calls`` when the logs recorded no tokens."""
    failed_spend: float
    """Spend of the runs of failed tasks, in ``spend_measure``."""
    saved_spend: float
    """Of that, the part past the would-be stops."""
    saved_share: float | None
    stops: tuple[ReplayStop, ...]
    """Would-be stops by reason, most frequent first."""

    @property
    def cut_share(self) -> float | None:
        return (
            self.successful_cut / self.successful_task_runs if self.successful_task_runs else None
        )

    @property
    def stopped_share(self) -> float | None:
        return self.failed_stopped / self.failed_task_runs if self.failed_task_runs else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cut_share"] = self.cut_share
        d["stopped_share"] = self.stopped_share
        return d


def _replay_stops(
    stops: list[dict[str, Any]], successful: str, failed: str
) -> tuple[ReplayStop, ...]:
    """The stop rows of one task type as :class:`ReplayStop`, most runs first; ``successful`` and
    ``failed`` name the query's columns for the two run counts."""
    return tuple(
        ReplayStop(
            reason=str(r["decision"]),
            runs=int(r["runs"]),
            successful_task_runs=int(r[successful]),
            failed_task_runs=int(r[failed]),
            median_step=None if r["median_step"] is None else float(r["median_step"]),
        )
        for r in sorted(stops, key=lambda r: (-int(r["runs"]), str(r["decision"])))
    )


def imported_replay(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    timeout_s: float | None = None,
) -> list[ImportedReplay]:
    """The replay of the imported runs in the window, per task type (none: nothing imported)."""
    rows = run_query(
        con,
        "import_replay",
        {
            "since": since,
            "until": until,
            "task_types": task_types,
        },
        max_rows=1_000_000,
        timeout_s=timeout_s,
    ).records()
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_type.setdefault(str(r["task_type"]), []).append(r)
    out = []
    for task_type, group in sorted(by_type.items()):
        stops = [r for r in group if r["decision"] != "finish"]
        with_tokens = sum(int(r["runs_with_tokens"]) for r in group)
        measure = "tokens" if with_tokens else "model_calls"
        failed = sum(float(r[f"failed_{measure}"]) for r in group)
        saved = sum(float(r[f"failed_saved_{measure}"]) for r in group)
        versions = sorted(
            {v for r in group for v in str(r["limits_versions"] or "").split(",") if v}
        )
        out.append(
            ImportedReplay(
                task_type=task_type,
                runs=sum(int(r["runs"]) for r in group),
                limits_versions=tuple(versions),
                successful_task_runs=sum(int(r["successful_task_runs"]) for r in group),
                successful_cut=sum(int(r["successful_task_runs"]) for r in stops),
                failed_task_runs=sum(int(r["failed_task_runs"]) for r in group),
                failed_stopped=sum(int(r["failed_task_runs"]) for r in stops),
                spend_measure=measure,
                failed_spend=failed,
                saved_spend=saved,
                saved_share=saved / failed if failed else None,
                stops=_replay_stops(stops, "successful_task_runs", "failed_task_runs"),
            )
        )
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class DetectorThreshold:
    """One detector of one task type on imported history: its false-stop curve and the
    threshold to set."""

    task_type: str
    detector: str
    field: str | None
    """The ``LoopLimits`` field of its threshold (``None``: a fixed rule)."""
    successful_runs: int
    failed_runs: int
    curve: tuple[tuple[int, float | None, float | None], ...]
    """(threshold, false-stop share, caught share) for thresholds 2..max."""
    suggested: int | None
    """The smallest threshold whose false-stop share is at most the target; ``None`` when even
    the largest tried is above it, when there are too few runs of successful tasks to measure
    the target (fewer than 1 / target), or when the rule is fixed."""
    false_stop_share: float | None
    """The false-stop share at ``suggested`` (for a fixed rule: at its own threshold, 2)."""
    caught_share: float | None
    """The share of runs of failed tasks stopped at ``suggested``."""
    target: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def detector_thresholds(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    target: float = 0.01,
    max_threshold: int = 10,
    timeout_s: float | None = None,
) -> list[DetectorThreshold]:
    """Per task type and detector, false stops and catches of thresholds 2..``max_threshold``
    on the imported runs, and the smallest threshold with false stops ≤ ``target``."""
    if not 0 <= target <= 1:
        raise ValueError(f"target must be between 0 and 1, got {target!r}")
    rows = run_query(
        con,
        "import_detectors",
        {
            "since": since,
            "until": until,
            "task_types": task_types,
            "max_threshold": max_threshold,
        },
        max_rows=1_000_000,
        timeout_s=timeout_s,
    ).records()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["task_type"]), str(r["detector"])), []).append(r)
    order = list(DETECTOR_FIELDS)
    out = []
    for (task_type, detector), group in sorted(
        groups.items(),
        key=lambda kv: (kv[0][0], order.index(kv[0][1]) if kv[0][1] in order else 99),
    ):
        group.sort(key=lambda r: int(r["threshold"]))
        curve = tuple(
            (
                int(r["threshold"]),
                None if r["false_stop_share"] is None else float(r["false_stop_share"]),
                None if r["caught_share"] is None else float(r["caught_share"]),
            )
            for r in group
        )
        field = DETECTOR_FIELDS.get(detector)
        successful = int(group[0]["successful_runs"])
        # A share of 1% cannot be told from 0 with fewer than 100 runs: suggest nothing then.
        enough = target > 0 and successful >= math.ceil(1 / target - 1e-9)
        if field is None or not enough:
            pick = curve[0] if curve and field is None else None
            suggested = None
        else:
            pick = next((c for c in curve if c[1] is not None and c[1] <= target), None)
            suggested = pick[0] if pick is not None else None
        out.append(
            DetectorThreshold(
                task_type=task_type,
                detector=detector,
                field=field,
                successful_runs=successful,
                failed_runs=int(group[0]["failed_runs"]),
                curve=curve,
                suggested=suggested,
                false_stop_share=pick[1] if pick is not None else None,
                caught_share=pick[2] if pick is not None else None,
                target=target,
            )
        )
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ShadowEvaluation:
    """One task type's shadow (candidate) limits on live runs, next to the enforced ones."""

    task_type: str
    candidate: str
    """The candidate limits' version (``loopwatch.shadow.limits.version``)."""
    runs: int
    """Runs that carried this candidate."""
    successful_runs: int
    successful_cut: int
    """Successful runs the candidate would have stopped (would-be false cuts)."""
    failed_runs: int
    """Runs that did not succeed."""
    enforced_stopped: int
    """Of those, runs the enforced limits stopped (outcome ``limit`` or ``stuck``)."""
    shadow_stopped: int
    """Of those, runs the candidate would have stopped before they ended."""
    spend_measure: str
    """``cost_usd``, or ``tokens`` when the failed runs recorded no cost."""
    failed_spend: float
    saved_spend: float
    """Spend of the failed runs past the candidate's would-be stops."""
    saved_share: float | None
    stops: tuple[ReplayStop, ...]
    """The candidate's would-be stops by reason."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def shadow_evaluations(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    timeout_s: float | None = None,
) -> list[ShadowEvaluation]:
    """Per task type and candidate, what the shadow limits would have done to the live runs
    that carried them (``shadow_limits``); empty when no run had shadow limits."""
    rows = run_query(
        con,
        "shadow_limits",
        {
            "since": since,
            "until": until,
            "task_types": task_types,
        },
        max_rows=1_000_000,
        timeout_s=timeout_s,
    ).records()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["task_type"]), str(r["candidate"])), []).append(r)
    out = []
    for (task_type, candidate), group in sorted(groups.items()):
        stops = [r for r in group if r["decision"] != "finish"]
        cost = sum(float(r["failed_cost_usd"]) for r in group)
        measure = "cost_usd" if cost > 0 else "tokens"
        failed = sum(float(r[f"failed_{measure}"]) for r in group)
        saved = sum(float(r[f"failed_saved_{measure}"]) for r in group)
        out.append(
            ShadowEvaluation(
                task_type=task_type,
                candidate=candidate,
                runs=sum(int(r["runs"]) for r in group),
                successful_runs=sum(int(r["successful_runs"]) for r in group),
                successful_cut=sum(int(r["successful_runs"]) for r in stops),
                failed_runs=sum(int(r["failed_runs"]) for r in group),
                enforced_stopped=sum(int(r["enforced_stops"]) for r in group),
                shadow_stopped=sum(int(r["failed_runs"]) for r in stops),
                spend_measure=measure,
                failed_spend=failed,
                saved_spend=saved,
                saved_share=saved / failed if failed else None,
                stops=_replay_stops(stops, "successful_runs", "failed_runs"),
            )
        )
    return out


ERROR_DETECTORS: Final = ("repeated_error", "tool_failures")
"""The detectors that see only tool results classified as errors."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorClassification:
    """How many of a task type's tool results were classified as errors."""

    task_type: str
    tool_results: int
    errors: int

    @property
    def almost_none(self) -> bool:
        """At most 0.1% (docs/import.md): the error detectors' rows then measure nothing."""
        return self.tool_results > 0 and self.errors <= 0.001 * self.tool_results

    def sentence(self) -> str:
        return (
            f"only {self.errors:,} of {self.tool_results:,} tool results were classified as "
            "errors, so repeated_error and tool_failures measure nothing (their 0% rows are not "
            "evidence); `loopwatch import` prints --error-prefix rules found in the data: "
            "import again with them"
        )


def error_classification(
    con: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    task_types: Sequence[str] | None = None,
    timeout_s: float | None = None,
) -> dict[str, ErrorClassification]:
    """Per task type, replayed runs' tool results (the runs the detector tables judge) and those
    classified as errors (``tool_result_errors``); a live tool fails by raising."""
    rows = run_query(
        con,
        "tool_result_errors",
        {
            "since": since,
            "until": until,
            "task_types": task_types,
            "replayed": True,
        },
        max_rows=1_000_000,
        timeout_s=timeout_s,
    ).records()
    return {
        str(r["task_type"]): ErrorClassification(
            task_type=str(r["task_type"]), tool_results=int(r["calls"]), errors=int(r["errors"])
        )
        for r in rows
    }
